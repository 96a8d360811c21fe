// The quantized KV caches (--kv-cache-dtype q8_0 / fp8): FP8 E4M3 conversions, every kernel table's attention
// entries against the scalar reference, stories260K's greedy output with a q8_0 cache against f32's on the
// fixture prompts, and the capacity the smaller rows buy.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "core/fp8.h"
#include "engine/engine_core.h"
#include "engine/sample/logits_ops.h"
#include "engine/single_sequence.h"
#include "kernels/cpu/cpu_kernels.h"
#include "model/kv_cache.h"
#include "model/llama.h"

using namespace kvik;

namespace {

const char* const kStories = KVIK_SOURCE_DIR "/models/stories260K.gguf";

std::vector<const CpuKernels*> runnable_tables() {
  __builtin_cpu_init();
  std::vector<const CpuKernels*> t = {&generic_kernels()};
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  if (avx2_kernels() && avx2) t.push_back(avx2_kernels());
  if (avx512_kernels() && avx512) t.push_back(avx512_kernels());
  return t;
}

// The γ bound of test_kernels.cpp: sums that differ only in order are within (n + 64)·2⁻²⁴·Σ|terms|.
double gamma(int64_t n) { return static_cast<double>(n + 64) * std::ldexp(1.0, -24); }

// Cache rows x (`row` values each) stored as Q8_0 blocks and as FP8 bytes, each with its dequantized values; key j of
// offsets(n, d) is head j % 4 of row (7·j) % rows, keys scattered over the rows as a block table scatters them.
struct QuantRows {
  QuantRows(const std::vector<float>& x, int64_t row_values)
      : row(row_values),
        rows(static_cast<int64_t>(x.size()) / row_values),
        q8(x.size() / 32),
        f8(x.size()),
        deq_q8(x.size()),
        deq_f8(x.size()) {
    quantize_row(DType::Q8_0, x.data(), q8.data(), static_cast<int64_t>(x.size()));
    dequantize_row(DType::Q8_0, q8.data(), deq_q8.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) f8[i] = f32_to_fp8_e4m3(x[i]), deq_f8[i] = fp8_e4m3_to_f32(f8[i]);
  }
  const std::vector<float>& deq(bool fp8) const { return fp8 ? deq_f8 : deq_q8; }
  std::vector<int64_t> offsets(int64_t n, int64_t d) const {
    std::vector<int64_t> off(n);
    for (int64_t j = 0; j < n; ++j) off[j] = ((j * 7) % rows) * row + (j % 4) * d;
    return off;
  }

  int64_t row, rows;
  std::vector<BlockQ8_0> q8;
  std::vector<uint8_t> f8;
  std::vector<float> deq_q8, deq_f8;
};

}  // namespace

TEST(KvQuant, Fp8E4M3Conversions) {
  // Every finite code decodes and encodes back to itself; ±448 is the largest value; NaN stays NaN.
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    EXPECT_EQ(f32_to_fp8_e4m3(v), b == 0x80 ? 0x80 : b) << b;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7E);  // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-1e6f), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), f32_to_fp8_e4m3(1.0f));   // halfway to 1.125: ties to even (1.0)
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), f32_to_fp8_e4m3(1.25f));  // halfway 1.125..1.25: even is 1.25
  // Round to nearest: the error is at most half a step (relative 2^-4 for normals).
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 20.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = nd(rng);
    const float y = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x));
    EXPECT_LE(std::fabs(y - x), std::max(std::fabs(x) * 0.0625f, std::ldexp(1.0f, -10))) << x;
  }
}

// Scores and weighted sums over Q8_0 and FP8 rows: each runnable table against the scalar reference, head dims
// 8 (rows starting inside a Q8_0 block, as stories260K's), 16, 40 (not a multiple of 16), 64, 128 and 20 (the
// scalar fallback), keys below and past the 16-row tree.
TEST(KvQuant, AttentionKernelsMatchReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const CpuKernels* k : runnable_tables())
    for (int64_t d : {8, 16, 20, 40, 64, 128})
      for (int64_t keys : {1, 15, 17, 100}) {
        SCOPED_TRACE(std::string(k->isa) + " d=" + std::to_string(d) + " keys=" + std::to_string(keys));
        const int64_t row = d * 4 % 32 == 0 ? d * 4 : 160;  // a cache row holds 4 heads (a multiple of 32)
        const int64_t rows = keys + 5;
        std::vector<float> x(rows * row), q(d), p(keys);
        for (auto& v : x) v = nd(rng) * 3;
        for (auto& v : q) v = nd(rng);
        for (auto& v : p) v = std::fabs(nd(rng));
        const QuantRows cache(x, row);
        const std::vector<int64_t> off = cache.offsets(keys, d);
        std::vector<float> s0(keys), s1(keys), o0(d), o1(d);
        const CpuKernels& ref = generic_kernels();
        for (int fp8 = 0; fp8 < 2; ++fp8) {
          const std::vector<float>& deq = cache.deq(fp8);
          if (fp8)
            ref.scores_fp8(q.data(), cache.f8.data(), off.data(), keys, d, 0.5f, s0.data()),
                k->scores_fp8(q.data(), cache.f8.data(), off.data(), keys, d, 0.5f, s1.data());
          else
            ref.scores_q8_0(q.data(), cache.q8.data(), off.data(), keys, d, 0.5f, s0.data()),
                k->scores_q8_0(q.data(), cache.q8.data(), off.data(), keys, d, 0.5f, s1.data());
          if (fp8)
            ref.wsum_fp8(p.data(), cache.f8.data(), off.data(), keys, d, o0.data()),
                k->wsum_fp8(p.data(), cache.f8.data(), off.data(), keys, d, o1.data());
          else
            ref.wsum_q8_0(p.data(), cache.q8.data(), off.data(), keys, d, o0.data()),
                k->wsum_q8_0(p.data(), cache.q8.data(), off.data(), keys, d, o1.data());
          for (int64_t j = 0; j < keys; ++j) {
            double mag = 0, exact = 0;
            for (int64_t i = 0; i < d; ++i)
              mag += std::fabs(q[i] * deq[off[j] + i]), exact += double(q[i]) * deq[off[j] + i];
            EXPECT_NEAR(s1[j], s0[j], gamma(d) * mag * 0.5) << "fp8=" << fp8 << " scores j=" << j;
            EXPECT_NEAR(s0[j], exact * 0.5, gamma(d) * mag * 0.5) << "reference vs the dequantized rows";
          }
          for (int64_t i = 0; i < d; ++i) {
            double mag = 0;
            for (int64_t j = 0; j < keys; ++j) mag += std::fabs(p[j] * deq[off[j] + i]);
            EXPECT_NEAR(o1[i], o0[i], gamma(keys) * mag) << "fp8=" << fp8 << " wsum i=" << i;
          }
        }
      }
}

// Every table's FP8 value sums read each of the 256 codes as fp8_e4m3_to_f32 does (one value row holding every code,
// weight 1: the sum is the value itself; the AVX-512 kernels convert through fp16 instead of the table).
TEST(KvQuant, Fp8RowsReadEveryCodeAsTheTable) {
  std::vector<uint8_t> codes(256);
  for (int b = 0; b < 256; ++b) codes[b] = static_cast<uint8_t>(b);
  const int64_t off = 0;
  const float p = 1.0f;
  for (const CpuKernels* k : runnable_tables()) {
    std::vector<float> out(256);
    k->wsum_multi_fp8(&p, 1, 1, codes.data(), &off, 1, 256, out.data(), 256);
    for (int b = 0; b < 256; ++b) {
      const float want = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(out[b])) << k->isa << " code " << b;
      else
        EXPECT_EQ(out[b], want) << k->isa << " code " << b;  // exact (the sum of +0 and -0 is +0)
    }
  }
}

// The multi-query forms the paged attention calls: every runnable table within the reference's bound, and a query's
// scores and value sums bit for bit the same computed alone, among 7 queries (a group of 4, then AVX2's pair and
// single shapes), or (scores) with the key range started 3 keys earlier: what keeps attention over a quantized cache
// batch-invariant. Head dims 8, 24 and 40 (Q8_0 rows inside a block: the AVX-512 table's per-row fallback, AVX2's
// 8-element runs), 32, 64, 128 and 256 (rows on block boundaries), 12 and 264 (per-query fallbacks: not whole
// vectors, more than the transposed block holds).
TEST(KvQuant, MultiQueryKernelsMatchReferenceAndDoNotDependOnTheTile) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const CpuKernels* k : runnable_tables())
    for (int64_t d : {8, 12, 24, 32, 40, 64, 128, 256, 264})
      for (int64_t keys : {1, 15, 16, 17, 64, 100}) {
        SCOPED_TRACE(std::string(k->isa) + " d=" + std::to_string(d) + " keys=" + std::to_string(keys));
        const int64_t row = d * 4 % 32 == 0 ? d * 4 : 160, rows = keys + 8, nq = 7;
        std::vector<float> x(rows * row), q(nq * d), p(nq * (keys + 3));
        for (auto& v : x) v = nd(rng) * 3;
        for (auto& v : q) v = nd(rng);
        for (auto& v : p) v = std::fabs(nd(rng)) / static_cast<float>(keys);
        const QuantRows cache(x, row);
        const std::vector<int64_t> off = cache.offsets(keys + 3, d);
        for (int fp8 = 0; fp8 < 2; ++fp8) {
          const std::vector<float>& deq = cache.deq(fp8);
          auto scores = [&](const CpuKernels& t, const float* qq, int64_t n_q, const int64_t* o, int64_t n,
                            float* out) {
            if (fp8)
              t.scores_multi_fp8(qq, d, n_q, cache.f8.data(), o, n, d, 0.5f, out, n);
            else
              t.scores_multi_q8_0(qq, d, n_q, cache.q8.data(), o, n, d, 0.5f, out, n);
          };
          auto sums = [&](const CpuKernels& t, const float* pp, int64_t n_q, float* out) {
            if (fp8)
              t.wsum_multi_fp8(pp, keys, n_q, cache.f8.data(), off.data() + 3, keys, d, out, d);
            else
              t.wsum_multi_q8_0(pp, keys, n_q, cache.q8.data(), off.data() + 3, keys, d, out, d);
          };
          std::vector<float> s0(nq * keys), s1(nq * keys), alone(keys), shifted(keys + 3), o0(nq * d), o1(nq * d),
              one(d);
          scores(generic_kernels(), q.data(), nq, off.data() + 3, keys, s0.data());
          scores(*k, q.data(), nq, off.data() + 3, keys, s1.data());
          sums(generic_kernels(), p.data(), nq, o0.data());
          sums(*k, p.data(), nq, o1.data());
          for (int64_t i = 0; i < nq; ++i) {
            for (int64_t j = 0; j < keys; ++j) {
              double mag = 0;
              for (int64_t c = 0; c < d; ++c) mag += std::fabs(q[i * d + c] * deq[off[3 + j] + c]);
              EXPECT_NEAR(s1[i * keys + j], s0[i * keys + j], gamma(d) * mag * 0.5) << "fp8=" << fp8;
            }
            for (int64_t c = 0; c < d; ++c) {
              double mag = 0;
              for (int64_t j = 0; j < keys; ++j) mag += std::fabs(p[i * keys + j] * deq[off[3 + j] + c]);
              EXPECT_NEAR(o1[i * d + c], o0[i * d + c], gamma(keys) * mag) << "fp8=" << fp8;
            }
            scores(*k, q.data() + i * d, 1, off.data() + 3, keys, alone.data());
            scores(*k, q.data() + i * d, 1, off.data(), keys + 3, shifted.data());
            sums(*k, p.data() + i * keys, 1, one.data());
            for (int64_t j = 0; j < keys; ++j) {
              EXPECT_EQ(alone[j], s1[i * keys + j]) << "alone vs among 7: fp8=" << fp8 << " q=" << i << " j=" << j;
              EXPECT_EQ(shifted[j + 3], s1[i * keys + j]) << "range started 3 keys earlier: fp8=" << fp8;
            }
            for (int64_t c = 0; c < d; ++c) EXPECT_EQ(one[c], o1[i * d + c]) << "value sums alone vs among 7";
          }
        }
      }
}

// Greedy on the llama.cpp fixture prompts, 64 tokens, against an f32 cache. stories260K has d_h 8, so one Q8_0
// block holds the values of 4 KV heads and shares their scale; where q8_0's tokens part from f32's, the step is a
// near tie under f32: the top two next-token probabilities within 1.25× (logit gap < ln 1.25). f16 and fp8 are
// printed for comparison.
TEST(KvQuant, Stories260kGreedyQ8MatchesF32) {
  std::ifstream in(KVIK_SOURCE_DIR "/tests/fixtures/ref_stories260k.json");
  const nlohmann::json fx = nlohmann::json::parse(in);
  auto model = LlamaModel::load(kStories);
  for (DType kv : {DType::F16, DType::Q8_0, DType::F8_E4M3}) {
    int identical = 0, cases = 0;
    float worst_gap = 0;
    for (const auto& c : fx.at("cases")) {
      const std::vector<int32_t> prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
      SingleSequence f32(*model, 128, DType::F32), other(*model, 128, kv);
      auto lf = f32.append(prompt), lq = other.append(prompt);
      bool same = true;
      for (int step = 0; step < 64; ++step) {
        const int32_t tf = argmax(lf), tq = argmax(lq);
        if (tf != tq) {
          std::vector<float> sorted = lf;
          std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
          worst_gap = std::max(worst_gap, sorted[0] - sorted[1]);
          if (kv == DType::Q8_0)
            EXPECT_LT(sorted[0] - sorted[1], std::log(1.25f))
                << c.at("prompt") << " step " << step << ": not a near tie";
          same = false;
          break;
        }
        const int32_t one[1] = {tf};
        lf = f32.append(one), lq = other.append(one);
      }
      identical += same, ++cases;
    }
    std::printf(
        "stories260K, %s KV: %d of %d prompts give f32's 64 greedy tokens; largest f32 top-2 logit gap where "
        "they part: %.3f\n",
        std::string(dtype_name(kv)).c_str(), identical, cases, worst_gap);
    if (kv == DType::Q8_0) EXPECT_GE(identical * 2, cases);
  }
}

// Same memory, more tokens: q8_0 holds ≥ 1.8× the tokens of f16, fp8 2×; the start-up sizing agrees.
TEST(KvQuant, CapacityAtTheSameMemory) {
  auto model = LlamaModel::load(kStories);
  const ModelConfig& c = model->config();
  const int64_t f16 = KvCacheTensors::bytes_per_token(c, DType::F16);
  EXPECT_EQ(KvCacheTensors::bytes_per_token(c, DType::F32), 2 * f16);
  EXPECT_EQ(KvCacheTensors::bytes_per_token(c, DType::F8_E4M3) * 2, f16);
  EXPECT_EQ(KvCacheTensors::bytes_per_token(c, DType::Q8_0), 2 * c.n_layers * c.kv_dim() / 32 * 34);
  int64_t tokens[2] = {};
  for (int i = 0; i < 2; ++i) {
    EngineConfig cfg;
    cfg.max_model_len = 256;
    cfg.kv_cache_memory_gib = 0.01;
    cfg.log_stats = false;
    cfg.kv_cache_dtype = i ? DType::Q8_0 : DType::F16;
    EngineCore e(*model, cfg, {2});
    tokens[i] = e.capacity().tokens;
  }
  EXPECT_GE(static_cast<double>(tokens[1]) / tokens[0], 1.8);
  std::printf("stories260K in 0.01 GiB: %lld tokens with an f16 cache, %lld with q8_0 (%.2fx)\n", (long long)tokens[0],
              (long long)tokens[1], static_cast<double>(tokens[1]) / tokens[0]);
}

TEST(KvQuant, Q8RejectsRowsThatAreNotWholeBlocks) {
  ModelConfig c;
  c.n_layers = 1, c.n_kv_heads = 3, c.head_dim = 10;
  EXPECT_THROW(KvCacheTensors(c, 4, 16, DType::Q8_0), Error);
  EXPECT_NO_THROW(KvCacheTensors(c, 4, 16, DType::F8_E4M3));
}
