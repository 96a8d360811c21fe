// "The cache does not cheat": logits computed with the KV cache equal the logits of recomputing the whole
// sequence from scratch; prefill in one append equals prefill in chunks; the cache's block size changes nothing.
// On stories260K (real weights) and on a random-weight F32 GQA model written by synth_llama_gguf.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/sample/sampler.h"
#include "engine/single_sequence.h"
#include "model/llama.h"
#include "model/synth.h"

using namespace kvik;
namespace fs = std::filesystem;

namespace {

constexpr const char* kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";
constexpr double kTol = 1e-4;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct Subject {
  std::string name;
  std::unique_ptr<LlamaModel> model;
  std::vector<int32_t> prompt;
};

const fs::path& temp_dir() {
  static const fs::path dir = fs::temp_directory_path() / ("kvik_kvcons_" + std::to_string(::getpid()));
  return dir;
}

// Removes the temp folder when the test binary ends.
struct TempCleanup : ::testing::Environment {
  void TearDown() override { fs::remove_all(temp_dir()); }
};
[[maybe_unused]] ::testing::Environment* const kCleanup = ::testing::AddGlobalTestEnvironment(new TempCleanup);

// A random-weight F32 GQA model (8 query heads share 2 KV heads, head_dim 32), written once per test binary.
const std::string& synth_path() {
  static const std::string path = [] {
    const fs::path dir = temp_dir();
    fs::create_directories(dir);
    SynthOptions o;
    o.out_path = (dir / "f32_gqa.gguf").string();
    o.dim = 256, o.layers = 2, o.heads = 8, o.kv_heads = 2, o.ff = 512, o.vocab = 512, o.seed = 7;
    o.type = DType::F32;
    o.tokenizer_from = kStories;
    synth_llama_gguf(o);
    return o.out_path;
  }();
  return path;
}

std::vector<Subject> subjects() {
  std::vector<Subject> s;
  // "Once upon a time, there was" as stories260K tokenizes it, with BOS.
  s.push_back({"stories260K", LlamaModel::load(kStories), {1, 403, 407, 261, 378, 432, 383, 286}});
  s.push_back({"synth f32 gqa", LlamaModel::load(synth_path()), {1, 403, 407, 261, 378, 100, 200, 300, 17, 42, 5}});
  return s;
}

std::vector<float> row(const std::vector<float>& logits, int64_t i, int64_t V) {
  return std::vector<float>(logits.begin() + i * V, logits.begin() + (i + 1) * V);
}

// Every KV cache type: the quantized ones store each token's row on its own, so recomputing writes the same bytes.
constexpr DType kAllKv[] = {DType::F32, DType::F16, DType::Q8_0, DType::F8_E4M3};

}  // namespace

// 40 greedy steps with the cache (one token per append); at every step the logits equal a fresh sequence that
// runs all tokens so far in one append.
TEST(KvCacheConsistency, CachedDecodeEqualsRecompute) {
  for (auto& sub : subjects())
    for (DType kv : kAllKv) {
      SCOPED_TRACE(sub.name + ", KV " + std::string(dtype_name(kv)).c_str());
      constexpr int kSteps = 40;
      const int64_t max_len = static_cast<int64_t>(sub.prompt.size()) + kSteps + 1;
      SingleSequence cached(*sub.model, max_len, kv);
      std::vector<int32_t> tokens = sub.prompt;
      auto logits = cached.append(tokens);
      float worst = 0;
      for (int step = 0; step < kSteps; ++step) {
        SingleSequence fresh(*sub.model, max_len, kv);
        const auto ref = fresh.append(tokens, 1);
        const float d = max_abs_diff(logits, ref);
        worst = std::max(worst, d);
        EXPECT_LE(d, kTol) << "step " << step << " (length " << tokens.size() << ")";
        const int32_t tok = argmax(logits);
        tokens.push_back(tok);
        const int32_t one[1] = {tok};
        logits = cached.append(one);
      }
      std::printf("%s, %s KV: cached decode vs recompute, max |Δlogit| over %d steps = %.3g\n", sub.name.c_str(),
                  std::string(dtype_name(kv)).c_str(), kSteps, worst);
    }
}

// The same sequence prefilled in one append and in chunks of 1, 3 and 7 tokens: every position's logits agree.
TEST(KvCacheConsistency, ChunkedPrefillEqualsOneAppend) {
  for (auto& sub : subjects())
    for (DType kv : kAllKv) {
      SCOPED_TRACE(sub.name + ", KV " + std::string(dtype_name(kv)).c_str());
      // A 40-token sequence: the prompt, then greedy continuation.
      std::vector<int32_t> tokens = sub.prompt;
      {
        SingleSequence g(*sub.model, 64);
        auto l = g.append(tokens);
        while (tokens.size() < 40) {
          tokens.push_back(argmax(l));
          const int32_t one[1] = {tokens.back()};
          l = g.append(one);
        }
      }
      const int64_t n = static_cast<int64_t>(tokens.size());
      const int64_t V = sub.model->config().vocab_size;
      SingleSequence whole(*sub.model, n, kv);
      const auto all = whole.append(tokens, n);
      for (int chunk : {1, 3, 7}) {
        SingleSequence s(*sub.model, n, kv);
        float worst = 0;
        for (int64_t start = 0; start < n; start += chunk) {
          const int64_t len = std::min<int64_t>(chunk, n - start);
          const auto part = s.append(std::span<const int32_t>(tokens).subspan(start, len), len);
          for (int64_t i = 0; i < len; ++i) {
            const float d = max_abs_diff(row(part, i, V), row(all, start + i, V));
            worst = std::max(worst, d);
            EXPECT_LE(d, kTol) << "chunk " << chunk << ", position " << start + i;
          }
        }
        std::printf("%s, %s KV: prefill in chunks of %d vs one append, max |Δlogit| = %.3g\n", sub.name.c_str(),
                    std::string(dtype_name(kv)).c_str(), chunk, worst);
      }
    }
}

// Block size 16 (the default), 1 and 32: identical logits, prefill and decode.
TEST(KvCacheConsistency, BlockSizeDoesNotChangeLogits) {
  for (auto& sub : subjects()) {
    SCOPED_TRACE(sub.name);
    const int64_t max_len = 64;
    std::vector<std::vector<float>> runs;
    for (int32_t bs : {16, 1, 32}) {
      SingleSequence s(*sub.model, max_len, DType::F32, bs);
      std::vector<float> out = s.append(sub.prompt, static_cast<int64_t>(sub.prompt.size()));
      for (int step = 0; step < 30; ++step) {
        const std::vector<float> last(out.end() - sub.model->config().vocab_size, out.end());
        const int32_t one[1] = {argmax(last)};
        const auto l = s.append(one);
        out.insert(out.end(), l.begin(), l.end());
      }
      runs.push_back(std::move(out));
    }
    EXPECT_EQ(runs[0], runs[1]) << "block size 16 vs 1";
    EXPECT_EQ(runs[0], runs[2]) << "block size 16 vs 32";
  }
}
