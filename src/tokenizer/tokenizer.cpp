#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/json_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace kvik {

namespace {

constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";

// A special id from `key`: the default when absent (or -1 if the default is outside a tiny vocab); -1
// (0xFFFFFFFF as u32, what converters write for "none") means no such token; any other id outside the
// vocab is an error, not a silent fallback.
int32_t special_id(const GgufFile& gguf, std::string_view key, int32_t fallback, int32_t n_vocab) {
  const auto v = gguf.get_int(key);
  if (!v) return fallback < n_vocab ? fallback : -1;
  if (*v == -1 || *v == static_cast<int64_t>(UINT32_MAX)) return -1;
  if (*v < 0 || *v >= n_vocab)
    fail("{}: metadata key '{}': token id {} is outside the vocabulary of {} tokens", gguf.path(), key, *v, n_vocab);
  return static_cast<int32_t>(*v);
}

}  // namespace

Vocab Vocab::from_gguf(const GgufFile& gguf, int32_t bos_default, int32_t eos_default, int32_t unk_default,
                       bool add_bos_default, bool add_eos_default) {
  Vocab vocab;
  const GgufValue& tokens = gguf.require_array(kTokensKey, GgufType::STRING);
  const size_t n = tokens.strings.size();
  if (n == 0) fail("{}: metadata key '{}': the vocabulary is empty", gguf.path(), kTokensKey);
  if (n > static_cast<size_t>(INT32_MAX))
    fail("{}: metadata key '{}': {} tokens do not fit int32 ids", gguf.path(), kTokensKey, n);

  const GgufValue* scores = gguf.find(kScoresKey) ? &gguf.require_array(kScoresKey, GgufType::F32) : nullptr;
  if (scores && scores->count != n)
    fail("{}: metadata key '{}' has {} entries but '{}' has {}", gguf.path(), kScoresKey, scores->count, kTokensKey, n);
  const GgufValue* types = gguf.find(kTypesKey) ? &gguf.require_array(kTypesKey, GgufType::I32) : nullptr;
  if (types && types->count != n)
    fail("{}: metadata key '{}' has {} entries but '{}' has {}", gguf.path(), kTypesKey, types->count, kTokensKey, n);

  vocab.tokens.resize(n);
  vocab.scores.assign(n, 0.0f);
  vocab.types.assign(n, TokenType::kNormal);
  vocab.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string text(tokens.strings[i]);
    if (text.empty()) text = "[EMPTY_" + std::to_string(i) + "]";
    vocab.token_to_id[text] = static_cast<int32_t>(i);
    vocab.tokens[i] = std::move(text);
    if (scores) vocab.scores[i] = static_cast<float>(scores->array_f(i));
    if (types) {
      const int64_t t = types->array_i(i);
      if (t < 0 || t > static_cast<int64_t>(TokenType::kByte))
        fail("{}: metadata key '{}': token {} has unknown type {}", gguf.path(), kTypesKey, i, t);
      vocab.types[i] = static_cast<TokenType>(t);
    }
  }

  const auto n_vocab = static_cast<int32_t>(n);
  vocab.bos_id = special_id(gguf, "tokenizer.ggml.bos_token_id", bos_default, n_vocab);
  vocab.eos_id = special_id(gguf, "tokenizer.ggml.eos_token_id", eos_default, n_vocab);
  vocab.unk_id = special_id(gguf, "tokenizer.ggml.unknown_token_id", unk_default, n_vocab);
  vocab.pad_id = special_id(gguf, "tokenizer.ggml.padding_token_id", -1, n_vocab);
  if (vocab.eos_id >= 0) vocab.eog_ids.push_back(vocab.eos_id);
  for (std::string_view key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = special_id(gguf, key, -1, n_vocab);
    if (id >= 0 && std::find(vocab.eog_ids.begin(), vocab.eog_ids.end(), id) == vocab.eog_ids.end())
      vocab.eog_ids.push_back(id);
  }

  vocab.chat_template = gguf.get_string("tokenizer.chat_template").value_or("");
  vocab.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(add_bos_default);
  vocab.add_eos = gguf.get_bool("tokenizer.ggml.add_eos_token").value_or(add_eos_default);
  if (vocab.add_bos && vocab.bos_id < 0)
    fail("{}: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set", gguf.path());
  if (vocab.add_eos && vocab.eos_id < 0)
    fail("{}: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set", gguf.path());
  return vocab;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_.size()) fail("token id {} is outside the vocabulary of {} tokens", id, vocab_.size());
}

bool Tokenizer::is_special(int32_t id) const {
  const TokenType t = token_type(id);
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::find(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id) != vocab_.eog_ids.end();
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return vocab_.types[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_.tokens[id];
}

std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const GgufFile& gguf) {
  const std::string model = gguf.require_string("tokenizer.ggml.model");
  if (model == "llama") return std::make_unique<SpmTokenizer>(gguf);
  if (model == "gpt2") return BpeTokenizer::from_gguf(gguf);
  fail("{}: tokenizer.ggml.model '{}' is not supported yet", gguf.path(), model);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) {
    auto g = GgufFile::open(path);
    return load_tokenizer_from_gguf(*g);
  }
  const fs::path dir(path);
  const fs::path tj = dir / "tokenizer.json";
  if (!fs::exists(tj))
    fail(
        "{}: no tokenizer.json in this directory (kvik reads Hugging Face tokenizer.json; tokenizer.model alone "
        "is not supported)",
        path);
  const fs::path cfg = dir / "tokenizer_config.json";
  nlohmann::json config = fs::exists(cfg) ? read_json_file(cfg) : nlohmann::json::object();
  if (!config.is_object()) fail("{}: not a JSON object", cfg.string());
  // The chat template may sit in a file of its own: chat_template.jinja (newer transformers) or chat_template.json
  // (multimodal processors such as Gemma 3's); tokenizer_config.json's wins where both have one.
  if (!config.contains("chat_template")) {
    if (fs::exists(dir / "chat_template.jinja")) {
      std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
      config["chat_template"] = std::string(std::istreambuf_iterator<char>(in), {});
    } else if (fs::exists(dir / "chat_template.json")) {
      const nlohmann::json ct = read_json_file(dir / "chat_template.json");
      if (!ct.is_object() || !ct.contains("chat_template") || !ct["chat_template"].is_string())
        fail("{}: expected {{\"chat_template\": \"...\"}}", (dir / "chat_template.json").string());
      config["chat_template"] = ct["chat_template"];
    }
  }
  return BpeTokenizer::from_hf_json(read_json_file(tj), config, tj.string());
}

}  // namespace kvik
