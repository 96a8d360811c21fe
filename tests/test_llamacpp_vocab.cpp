// Real vocabularies from the pinned llama.cpp (tests/llamacpp_assets): kvik's tokenizer against llama.cpp's own
// tokenizer cases (tests/test-tokenizer-0.cpp there: each *.gguf.inp text, split at "\n__ggml_vocab_test__\n",
// gives the ids on the same line of *.gguf.out, without BOS and without parsing special tokens).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llamacpp_assets.h"
#include "tokenizer/tokenizer.h"

namespace kvik {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<VocabCase> read_cases(const std::string& vocab) {
  const std::string inp = read_all(test::llamacpp_asset("models/" + vocab + ".inp"));
  std::istringstream out(read_all(test::llamacpp_asset("models/" + vocab + ".out")));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t at = 0; at < inp.size();) {
    const size_t next = inp.find(sep, at);
    cases.push_back({inp.substr(at, next == std::string::npos ? std::string::npos : next - at), {}});
    at = next == std::string::npos ? inp.size() : next + sep.size();
  }
  for (VocabCase& c : cases) {
    std::string line;
    std::getline(out, line);
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

void expect_llamacpp_ids(const std::string& vocab) {
  const auto tok = load_tokenizer(test::llamacpp_asset("models/" + vocab));
  const std::vector<VocabCase> cases = read_cases(vocab);
  ASSERT_GT(cases.size(), 10u) << vocab;
  for (const VocabCase& c : cases)
    EXPECT_EQ(tok->encode(c.text, false, false), c.ids) << vocab << ": \"" << c.text << '"';
}

TEST(LlamacppVocab, Qwen2GivesLlamaCppIds) { expect_llamacpp_ids("ggml-vocab-qwen2.gguf"); }
TEST(LlamacppVocab, Llama3BpeGivesLlamaCppIds) { expect_llamacpp_ids("ggml-vocab-llama-bpe.gguf"); }
TEST(LlamacppVocab, LlamaSpmGivesLlamaCppIds) { expect_llamacpp_ids("ggml-vocab-llama-spm.gguf"); }

}  // namespace
}  // namespace kvik
