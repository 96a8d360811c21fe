// The quantizers of `kvik quantize` and the runtime kernels of Q4_1, Q5_0, Q5_1 and IQ4_NL.
//
// tests/data/quants_llamacpp.bin comes from llama.cpp itself (libggml-base.so / libggml-cpu-x64.so of
// node-llama-cpp 3.21.1):
//   ninja -C build kvik_peer_tool && build/kvik_peer_tool quant-fixture
//   tests/data/quants_llamacpp.bin
// It holds 16 rows of 256 floats (zeros, constants, spikes, denormals, outliers past fp16's range, exact ties, ...),
// what ggml_quantize_chunk (llama-quantize's call, no importance matrix) makes of them for every type, what ggml's
// dequantizers make of that, and ggml's reference dot products against Q8_0 / Q8_1 activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernel_tables.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tensor/dtype.h"
#include "tensor/quantize.h"

using namespace kvik;

namespace {

struct Case {
  DType type;
  std::vector<uint8_t> quantized;
  std::vector<float> dequantized;
  std::vector<float> dots;  // ggml_vec_dot_<type>_q8_{0,1}_generic per row (new runtime types only)
};
struct Fixture {
  int64_t rows = 0, cols = 0;
  std::vector<float> input, act;
  std::vector<Case> cases;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    std::ifstream in(KVIK_SOURCE_DIR "/tests/data/quants_llamacpp.bin", std::ios::binary);
    if (!in)
      throw std::runtime_error(
          "tests/data/quants_llamacpp.bin missing (kvik_peer_tool quant-fixture makes it, tools/peer_tool.cpp)");
    auto u32 = [&] {
      uint32_t v = 0;
      in.read(reinterpret_cast<char*>(&v), 4);
      return v;
    };
    auto floats = [&](size_t n) {
      std::vector<float> v(n);
      in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
      return v;
    };
    char magic[4];
    in.read(magic, 4);
    if (std::memcmp(magic, "KVQ2", 4) != 0) throw std::runtime_error("bad fixture magic");
    Fixture f;
    f.rows = u32(), f.cols = u32();
    f.input = floats(static_cast<size_t>(f.rows * f.cols));
    f.act = floats(f.input.size());
    for (uint32_t i = 0, n = u32(); i < n; ++i) {
      Case c;
      c.type = static_cast<DType>(u32());
      c.quantized.resize(u32());
      in.read(reinterpret_cast<char*>(c.quantized.data()), static_cast<std::streamsize>(c.quantized.size()));
      c.dequantized = floats(f.input.size());
      c.dots = floats(u32());
      f.cases.push_back(std::move(c));
    }
    if (!in) throw std::runtime_error("truncated fixture");
    return f;
  }();
  return f;
}

std::vector<uint32_t> bits(const float* v, size_t n) {
  std::vector<uint32_t> b(n);
  std::memcpy(b.data(), v, n * 4);
  return b;
}

const char* kRowNames[] = {"gaussian",         "gaussian x1000", "uniform",       "zeros",
                           "constant",         "spike",          "all negative",  "heavy tail",
                           "denormals",        "huge outliers",  "tiny values",   "half zeros",
                           "mixed magnitudes", "integer ties",   "near fp16 max", "positive + one negative"};

TEST(Quantize, FixtureCoversEveryTypeKvikQuantizeWrites) {
  std::vector<DType> want = {DType::F16,  DType::BF16,   DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                             DType::Q5_1, DType::IQ4_NL, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  ASSERT_EQ(fixture().cases.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(fixture().cases[i].type, want[i]);
    EXPECT_TRUE(can_quantize(want[i]));
  }
  EXPECT_FALSE(can_quantize(DType::Q2_K));
  EXPECT_FALSE(can_quantize(DType::Q8_K));
}

TEST(Quantize, EveryTypeIsByteIdenticalWithLlamaQuantize) {
  const Fixture& f = fixture();
  for (const Case& c : f.cases) {
    const size_t rb = *row_bytes(c.type, f.cols);
    std::vector<uint8_t> q(c.quantized.size(), 0xAB);
    quantize_rows(c.type, f.input.data(), q.data(), f.rows, f.cols);
    for (int64_t r = 0; r < f.rows; ++r)
      EXPECT_EQ(0, std::memcmp(q.data() + r * rb, c.quantized.data() + r * rb, rb))
          << dtype_name(c.type) << ", row " << r << " (" << kRowNames[r] << ")";
  }
}

TEST(Quantize, EveryTypeDequantizesBitExactlyAsGgml) {
  const Fixture& f = fixture();
  for (const Case& c : f.cases) {
    std::vector<float> y(f.input.size());
    dequantize_rows(c.type, c.quantized.data(), y.data(), f.rows, f.cols);
    for (int64_t r = 0; r < f.rows; ++r)
      EXPECT_EQ(bits(y.data() + r * f.cols, f.cols), bits(c.dequantized.data() + r * f.cols, f.cols))
          << dtype_name(c.type) << ", row " << r << " (" << kRowNames[r] << ")";
  }
}

// The input of one row as ActQ8 (with the Q8_1 sums), through the generic table.
struct Act {
  std::vector<uint8_t> qs;
  std::vector<float> d, s;
  int64_t nb = 0;
  ActQ8 view() const { return {qs.data(), d.data(), nb, s.data()}; }
};
Act make_act(const CpuKernels& k, const float* x, int64_t rows, int64_t n) {
  Act a{std::vector<uint8_t>(static_cast<size_t>(rows * n)), std::vector<float>(static_cast<size_t>(rows * n / 32)),
        std::vector<float>(static_cast<size_t>(rows * n / 32)), n / 32};
  for (int64_t r = 0; r < rows; ++r) {
    k.quantize_act_q8(x + r * n, a.qs.data() + r * n, a.d.data() + r * a.nb, n);
    act_q8_sums(x + r * n, a.qs.data() + r * n, a.s.data() + r * a.nb, n);
  }
  return a;
}

void gemv(const CpuKernels& k, DType t, const uint8_t* w, const ActQ8& x, int64_t R, float* out) {
  switch (t) {
    case DType::Q4_1: return k.gemv_q4_1(reinterpret_cast<const BlockQ4_1*>(w), x, R, out);
    case DType::Q5_0: return k.gemv_q5_0(reinterpret_cast<const BlockQ5_0*>(w), x, R, out);
    case DType::Q5_1: return k.gemv_q5_1(reinterpret_cast<const BlockQ5_1*>(w), x, R, out);
    case DType::IQ4_NL: return k.gemv_iq4_nl(reinterpret_cast<const BlockIQ4_NL*>(w), x, R, out);
    default: FAIL() << "no gemv for " << dtype_name(t);
  }
}

TEST(Quantize, ReferenceDotProductsAreBitExactWithGgmlVecDot) {
  const Fixture& f = fixture();
  int checked = 0;
  for (const Case& c : f.cases) {
    if (c.dots.empty()) continue;
    const size_t rb = *row_bytes(c.type, f.cols);
    for (int64_t r = 0; r < f.rows; ++r) {
      const Act a = make_act(generic_kernels(), f.act.data() + r * f.cols, 1, f.cols);
      float got = 0;
      gemv(generic_kernels(), c.type, c.quantized.data() + r * rb, a.view(), 1, &got);
      if (std::isnan(c.dots[r]))
        EXPECT_TRUE(std::isnan(got)) << dtype_name(c.type) << " row " << r;
      else
        EXPECT_EQ(bits(&got, 1), bits(&c.dots[r], 1)) << dtype_name(c.type) << " row " << r << " (" << kRowNames[r]
                                                      << "): kvik " << got << ", ggml " << c.dots[r];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * f.rows);
}

TEST(Quantize, ParallelRowsEqualOneRowAtATime) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t rows = 97, cols = 512;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = g(rng);
  ThreadPool::global().set_num_threads(2);
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q4_K, DType::Q6_K, DType::BF16}) {
    const size_t rb = *row_bytes(t, cols);
    std::vector<uint8_t> all(rb * rows), one(rb);
    quantize_rows(t, x.data(), all.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(t, x.data() + r * cols, one.data(), cols);
      ASSERT_EQ(0, std::memcmp(one.data(), all.data() + r * rb, rb)) << dtype_name(t) << " row " << r;
    }
  }
}

TEST(Quantize, RejectsRowsThatDoNotFillBlocksAndTypesItCannotWrite) {
  std::vector<float> x(48);
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(quantize_rows(DType::Q4_1, x.data(), out.data(), 1, 48), Error);
  EXPECT_THROW(quantize_rows(DType::Q4_K, x.data(), out.data(), 1, 32 * 3), Error);
  EXPECT_THROW(quantize_rows(DType::Q2_K, x.data(), out.data(), 0, 256), Error);
}

// Fake quantization error on Gaussian rows: more bits, less error; IQ4_NL's codebook beats Q4_0's uniform grid.
TEST(Quantize, ErrorShrinksWithBitsAndIq4NlBeatsQ4_0) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t rows = 64, cols = 256;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = g(rng);
  auto rmse = [&](DType t) {
    std::vector<float> y = x;
    fake_quantize_rows(t, y.data(), rows, cols);
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += (x[i] - y[i]) * (x[i] - y[i]);
    return std::sqrt(s / static_cast<double>(x.size()));
  };
  const double q4_0 = rmse(DType::Q4_0), q4_1 = rmse(DType::Q4_1), iq4 = rmse(DType::IQ4_NL), q5_0 = rmse(DType::Q5_0),
               q5_1 = rmse(DType::Q5_1), q8 = rmse(DType::Q8_0), f16 = rmse(DType::F16);
  std::printf("rmse: q4_0 %.4f q4_1 %.4f iq4_nl %.4f q5_0 %.4f q5_1 %.4f q8_0 %.5f f16 %.6f\n", q4_0, q4_1, iq4, q5_0,
              q5_1, q8, f16);
  EXPECT_LT(iq4, q4_0);
  EXPECT_LT(q5_0, q4_0);
  EXPECT_LT(q5_1, q4_1);
  EXPECT_LT(q8, q5_0);
  EXPECT_LT(f16, q8);
}

// ---- Kernel tables: every compiled table against the generic reference for the four new types.

using test::Table;
using test::tables;

class NewTypeKernels : public ::testing::TestWithParam<Table> {
 protected:
  void SetUp() override {
    if (!GetParam().runnable) GTEST_SKIP() << GetParam().name << " table: this CPU lacks the instructions";
  }
};

// Σ |terms| of one row's reference dot: |d_w·d_x·q_w·q_x| per element and |m_w·s_x| per block.
double abs_terms(DType t, const std::vector<uint8_t>& w, const Act& a, int64_t r) {
  std::vector<float> deq(static_cast<size_t>(a.nb * 32));
  dequantize_row(t, w.data(), deq.data(), a.nb * 32);
  double s = 0;
  for (int64_t b = 0; b < a.nb; ++b) {
    for (int j = 0; j < 32; ++j) {
      const int xq = static_cast<int>(a.qs[r * a.nb * 32 + act_q8_offset(a.nb, b, j)]) - 128;
      s += std::fabs(static_cast<double>(deq[b * 32 + j]) * xq * a.d[r * a.nb + b]);
    }
    s += std::fabs(static_cast<double>(a.s[r * a.nb + b])) * 64;  // the minimum's share, generously
  }
  return s;
}

// Unit scales (d = 1, m = 0) make every result an exact integer, equal in every table; random scales stay within
// the summation bound; and row r's result is bit for bit the same whatever R is (batch invariance).
TEST_P(NewTypeKernels, GemvMatchesReferenceAndIsIndependentOfR) {
  const CpuKernels& fast = *GetParam().k;
  std::mt19937 rng(99);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL})
    for (int64_t nb : {1, 2, 3, 4, 5, 8, 9, 33})
      for (bool unit : {true, false}) {
        const int64_t n = nb * 32;
        std::vector<float> wf(n), xf(kActQ8MaxRows * n);
        for (auto& v : wf) v = g(rng) + (t == DType::Q4_1 || t == DType::Q5_1 ? 0.7f : 0.0f);
        for (auto& v : xf) v = g(rng);
        const size_t bb = traits(t).block_bytes;
        std::vector<uint8_t> w(bb * nb);
        quantize_row(t, wf.data(), w.data(), n);
        if (unit)
          for (int64_t b = 0; b < nb; ++b) {
            const uint16_t one = f32_to_fp16(1.0f), zero = 0;
            std::memcpy(w.data() + b * bb, &one, 2);
            if (t == DType::Q4_1 || t == DType::Q5_1) std::memcpy(w.data() + b * bb + 2, &zero, 2);
          }
        Act a = make_act(generic_kernels(), xf.data(), kActQ8MaxRows, n);
        if (unit) std::fill(a.d.begin(), a.d.end(), 1.0f);
        float want[kActQ8MaxRows], got[kActQ8MaxRows], alone[kActQ8MaxRows];
        gemv(generic_kernels(), t, w.data(), a.view(), kActQ8MaxRows, want);
        for (int64_t r = 0; r < kActQ8MaxRows; ++r) {
          ActQ8 one = a.view();
          one.qs += r * n, one.d += r * nb, one.s += r * nb;
          // A single row's ActQ8 pairs its blocks the same way, so the row's bytes are usable as they are.
          gemv(fast, t, w.data(), one, 1, &alone[r]);
        }
        for (int64_t R = 1; R <= kActQ8MaxRows; ++R) {
          gemv(fast, t, w.data(), a.view(), R, got);
          for (int64_t r = 0; r < R; ++r) {
            const std::string where = std::string(dtype_name(t)) + " nb=" + std::to_string(nb) +
                                      " R=" + std::to_string(R) + " r=" + std::to_string(r);
            if (unit)
              EXPECT_EQ(got[r], want[r]) << where;
            else
              EXPECT_LE(std::fabs(double(got[r]) - want[r]), (n + 64) * std::ldexp(1.0, -24) * abs_terms(t, w, a, r))
                  << where;
            EXPECT_EQ(got[r], alone[r]) << "batch invariance: " << where;
          }
        }
      }
}

// quantize_act_q8 + act_q8_sums give ggml's Q8_1 block (q, d and s) bit for bit.
TEST(Quantize, ActivationSumsAreGgmlQ8_1s) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 2.0f);
  const int64_t n = 32 * 5;
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;  // an all-zero block: d = 0, s = 0
  const Act a = make_act(generic_kernels(), x.data(), 1, n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += static_cast<int>(std::roundf(x[b * 32 + j] * id));
    EXPECT_EQ(a.s[b], fp16_to_f32(f32_to_fp16(static_cast<float>(sum) * d))) << "block " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, NewTypeKernels, ::testing::ValuesIn(tables()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
