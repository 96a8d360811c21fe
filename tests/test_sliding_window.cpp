// Sliding-window attention (Mistral's sliding_window, GGUF {arch}.attention.sliding_window): the paged-attention
// kernel against a plain softmax over the last W keys, and the model's logits against what the window implies.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "engine/single_sequence.h"
#include "kernels/cpu/paged_attention.h"
#include "model/llama.h"
#include "model/model_config.h"
#include "model/synth.h"

using namespace kvik;
namespace fs = std::filesystem;

namespace {

// One request of n tokens (a prefill), K/V in shuffled blocks of an F32 cache; returns out [n, n_h, d_h].
std::vector<float> run_paged(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             int32_t n, int64_t n_h, int64_t n_kv, int64_t d, int32_t window) {
  const int32_t bs = 4, nb = (n + bs - 1) / bs;
  std::vector<int32_t> table(nb);
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 rng(1);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> kc(static_cast<size_t>(nb * bs * n_kv * d)), vc(kc.size());
  std::vector<int64_t> slots(n);
  for (int32_t p = 0; p < n; ++p) slots[p] = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
  write_kv(k.data(), v.data(), slots.data(), n, n_kv * d, kc.data(), vc.data(), DType::F32);
  std::vector<int32_t> qsl = {0, n}, seq_lens = {n}, pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> out(static_cast<size_t>(n * n_h * d));
  PagedAttentionArgs a;
  a.q = q.data(), a.k_cache = kc.data(), a.v_cache = vc.data(), a.kv_dtype = DType::F32, a.out = out.data();
  a.num_reqs = 1, a.query_start_loc = qsl.data(), a.seq_lens = seq_lens.data(), a.positions = pos.data();
  a.block_tables = table.data(), a.max_blocks_per_seq = nb, a.block_size = bs;
  a.n_heads = n_h, a.n_kv_heads = n_kv, a.head_dim = d, a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.sliding_window = window;
  paged_attention(a);
  return out;
}

}  // namespace

TEST(SlidingWindow, PagedAttentionSeesOnlyTheLastWKeys) {
  const int32_t n = 37;
  const int64_t n_h = 4, n_kv = 2, d = 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(n * n_h * d), k(n * n_kv * d), v(k.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = g(rng);
  const auto full = run_paged(q, k, v, n, n_h, n_kv, d, 0);
  EXPECT_EQ(run_paged(q, k, v, n, n_h, n_kv, d, n), full) << "a window as long as the sequence changed something";
  for (int32_t W : {1, 5, 16}) {
    const auto out = run_paged(q, k, v, n, n_h, n_kv, d, W);
    for (int32_t p = 0; p < n; ++p)
      for (int64_t h = 0; h < n_h; ++h) {
        const int64_t kvh = h / (n_h / n_kv);
        const int32_t first = std::max(0, p - W + 1);
        std::vector<double> s;
        for (int32_t j = first; j <= p; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += double(q[(p * n_h + h) * d + i]) * k[(j * n_kv + kvh) * d + i];
          s.push_back(dot / std::sqrt(double(d)));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (auto& x : s) sum += x = std::exp(x - mx);
        for (int64_t i = 0; i < d; ++i) {
          double ref = 0;
          for (int32_t j = first; j <= p; ++j) ref += s[j - first] / sum * v[(j * n_kv + kvh) * d + i];
          ASSERT_NEAR(out[(p * n_h + h) * d + i], ref, 1e-5) << "W " << W << " pos " << p << " head " << h;
        }
      }
  }
}

namespace {

std::string synth_window_model(const fs::path& dir, int layers, int window) {
  SynthOptions o;
  o.out_path = (dir / ("w" + std::to_string(layers) + "_" + std::to_string(window) + ".gguf")).string();
  o.dim = 64, o.layers = layers, o.heads = 4, o.kv_heads = 2, o.ff = 128, o.vocab = 300, o.seed = 17;
  o.sliding_window = window;
  synth_llama_gguf(o);
  return o.out_path;
}

std::vector<float> last_logits(LlamaModel& m, const std::vector<int32_t>& ids) {
  SingleSequence s(m, static_cast<int64_t>(ids.size()) + 1);
  return s.append(ids);
}

}  // namespace

// One block: the output at position p depends only on tokens p − W + 1..p, and RoPE scores depend only on the
// distance between positions, so the last token's logits over a long prompt equal those of its last W tokens
// alone (starting at position 0) — and differ from full attention's.
TEST(SlidingWindow, OneBlockModelSeesOnlyTheWindow) {
  const fs::path dir = fs::temp_directory_path() / ("kvik_swa_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int W = 8;
  auto windowed = LlamaModel::load(synth_window_model(dir, 1, W));
  auto full = LlamaModel::load(synth_window_model(dir, 1, 0));
  EXPECT_EQ(windowed->config().sliding_window, W);
  std::vector<int32_t> ids;
  std::mt19937 rng(3);
  for (int i = 0; i < 30; ++i) ids.push_back(3 + static_cast<int32_t>(rng() % 290));
  const auto a = last_logits(*windowed, ids);
  const auto b = last_logits(*windowed, std::vector<int32_t>(ids.end() - W, ids.end()));
  const auto c = last_logits(*full, ids);
  float d_suffix = 0, d_full = 0;
  for (size_t i = 0; i < a.size(); ++i) d_suffix = std::max(d_suffix, std::fabs(a[i] - b[i]));
  for (size_t i = 0; i < a.size(); ++i) d_full = std::max(d_full, std::fabs(a[i] - c[i]));
  EXPECT_LE(d_suffix, 1e-4f) << "the window's tokens alone give other logits";
  EXPECT_GT(d_full, 1e-2f) << "the window made no difference";
  fs::remove_all(dir);
}

// Two blocks: a window at least as long as the sequence is full attention, bit for bit; a shorter one is not.
TEST(SlidingWindow, WindowLongerThanTheSequenceIsFullAttention) {
  const fs::path dir = fs::temp_directory_path() / ("kvik_swa2_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(5 + 11 * i % 280);
  auto full = LlamaModel::load(synth_window_model(dir, 2, 0));
  auto long_w = LlamaModel::load(synth_window_model(dir, 2, 24));
  auto short_w = LlamaModel::load(synth_window_model(dir, 2, 6));
  EXPECT_EQ(last_logits(*long_w, ids), last_logits(*full, ids));
  EXPECT_NE(last_logits(*short_w, ids), last_logits(*full, ids));
  fs::remove_all(dir);
}
