// Weights repacked at load (kernels/cpu/packed.h).
//  - The scalar references on the packed layout agree with the exact value of the quantized dot product (computed
//    in double from the plain blocks, ggml's integer formulation) within the float rounding bound, and with unit
//    scales exactly: so packing loses no element, scale or min, and a partial last group works.
//  - Every compiled packed kernel equals its scalar reference bit for bit for every token count R, so a token's
//    result never depends on the batch; quantize_act_q8s equals quantize_row_q8_0 bit for bit.
//  - matmul on a packed weight: batch-invariant, shared-input calls equal separate calls, and within the bound of
//    matmul on the same weight unpacked.
//  - BF16: where the CPU has AVX512_BF16, vdpbf16ps rounds as the SDM says (odd product, then even, DAZ / FTZ), so the
//    vdpbf16ps kernel, the FMA kernels over several groups a call and the one-chain reference agree bit for bit.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed.h"
#include "random_weights.h"
#include "tensor/quantize.h"

using namespace kvik;
using kvik::test::Acts;
using kvik::test::random_acts;
using kvik::test::random_weights;
using kvik::test::Weights;

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

double gamma(int64_t n) { return static_cast<double>(n + 64) * std::ldexp(1.0, -24); }

// The exact dot product of weight row r and activation row t (double, from the plain blocks), and the sum of the
// magnitudes of the float terms the kernels round (per block: d_w·d_x·sumi, and for Q4_K also dmin·d_x·Σm·s).
struct Exact {
  double value = 0, mag = 0;
};
Exact exact(const WeightMatrix& w, int64_t r, const Acts& a, int64_t t) {
  Exact e;
  const uint8_t* row = w.row(r);
  if (w.dtype == DType::Q4_K || w.dtype == DType::Q5_K) {
    const int64_t nb = w.cols / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ4_K& b4 = reinterpret_cast<const BlockQ4_K*>(row)[b];
      const BlockQ5_K& b5 = reinterpret_cast<const BlockQ5_K*>(row)[b];
      const bool q5 = w.dtype == DType::Q5_K;
      const BlockQ8_K& xb = a.q8k[t * nb + b];
      int64_t isum = 0, msum = 0;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        k_scale_min(j, q5 ? b5.scales : b4.scales, sc, m);
        int64_t p = 0, s = 0;
        for (int l = 0; l < 32; ++l)
          p += (q5 ? q5_k_quant(b5, 32 * j + l) : q4_k_quant(b4, 32 * j + l)) * xb.qs[32 * j + l],
              s += xb.qs[32 * j + l];
        isum += sc * p, msum += m * s;
      }
      const double dd = double(fp16_to_f32(q5 ? b5.d : b4.d)) * xb.d,
                   dm = double(fp16_to_f32(q5 ? b5.dmin : b4.dmin)) * xb.d;
      e.value += dd * isum - dm * msum;
      e.mag += std::fabs(dd * isum) + std::fabs(dm * msum);
    }
    return e;
  }
  if (w.dtype == DType::F32) {
    const float* wr = reinterpret_cast<const float*>(row);
    for (int64_t k = 0; k < w.cols; ++k) {
      const double term = double(wr[k]) * a.xf[t * w.cols + k];
      e.value += term, e.mag += std::fabs(term);
    }
    return e;
  }
  if (w.dtype == DType::F16 || w.dtype == DType::BF16) {
    const uint16_t* wr = reinterpret_cast<const uint16_t*>(row);
    const float* x = a.half(w.dtype) + t * w.cols;
    for (int64_t k = 0; k < w.cols; ++k) {
      const double wk = w.dtype == DType::F16 ? fp16_to_f32(wr[k]) : bf16_to_f32(wr[k]);
      const double term = wk * x[k];
      e.value += term, e.mag += std::fabs(term);
    }
    return e;
  }
  if (w.dtype == DType::Q6_K) {
    const int64_t nb = w.cols / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ6_K& blk = reinterpret_cast<const BlockQ6_K*>(row)[b];
      const BlockQ8_K& xb = a.q8k[t * nb + b];
      int64_t isum = 0;
      for (int j = 0; j < 16; ++j) {
        int64_t p = 0;
        for (int l = 0; l < 16; ++l) p += (q6_k_quant(blk, 16 * j + l) - 32) * xb.qs[16 * j + l];
        isum += blk.scales[j] * p;
      }
      const double term = double(fp16_to_f32(blk.d)) * xb.d * isum;
      e.value += term, e.mag += std::fabs(term);
    }
    return e;
  }
  const int64_t nb = w.cols / kQK8_0;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t sumi = 0;
    float dw;
    for (int j = 0; j < kQK8_0; ++j) {
      int q;
      if (w.dtype == DType::Q8_0)
        q = reinterpret_cast<const BlockQ8_0*>(row)[b].qs[j];
      else if (w.dtype == DType::IQ4_NL)
        q = iq4_nl_quant(reinterpret_cast<const BlockIQ4_NL*>(row)[b], j);
      else if (w.dtype == DType::Q5_0)
        q = q5_0_quant(reinterpret_cast<const BlockQ5_0*>(row)[b], j);
      else if (w.dtype == DType::Q4_1)
        q = q4_1_quant(reinterpret_cast<const BlockQ4_1*>(row)[b], j);
      else if (w.dtype == DType::Q5_1)
        q = q5_1_quant(reinterpret_cast<const BlockQ5_1*>(row)[b], j);
      else {
        const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
        q = (j < 16 ? (blk.qs[j] & 15) : (blk.qs[j - 16] >> 4)) - 8;
      }
      sumi += q * a.qs[t * w.cols + b * kQK8_0 + j];
    }
    dw = fp16_to_f32(w.dtype == DType::Q8_0   ? reinterpret_cast<const BlockQ8_0*>(row)[b].d
                     : w.dtype == DType::Q5_0 ? reinterpret_cast<const BlockQ5_0*>(row)[b].d
                     : w.dtype == DType::Q4_1 ? reinterpret_cast<const BlockQ4_1*>(row)[b].d
                     : w.dtype == DType::Q5_1 ? reinterpret_cast<const BlockQ5_1*>(row)[b].d
                                              : reinterpret_cast<const BlockQ4_0*>(row)[b].d);
    const double term = double(dw) * a.d[t * nb + b] * sumi;
    e.value += term, e.mag += std::fabs(term);
    if (w.dtype == DType::Q4_1 || w.dtype == DType::Q5_1) {  // the min term m_w·d_x·Σx
      const uint16_t m = w.dtype == DType::Q4_1 ? reinterpret_cast<const BlockQ4_1*>(row)[b].m
                                                : reinterpret_cast<const BlockQ5_1*>(row)[b].m;
      int64_t sx = 0;
      for (int j = 0; j < kQK8_0; ++j) sx += a.qs[t * w.cols + b * kQK8_0 + j];
      const double mterm = double(fp16_to_f32(m)) * a.d[t * nb + b] * sx;
      e.value += mterm, e.mag += std::fabs(mterm);
    }
  }
  return e;
}

// Runs the packed reference (or a table's kernel) over every group of w for R tokens: y[t·rows + r].
void run_packed(const WeightMatrix& w, const uint8_t* packed, const Acts& a, int64_t R, float* y, const CpuKernels* k) {
  const size_t gb = packed_group_bytes(w.dtype, w.cols);
  float tmp[kPackMaxTokens * kPackRows];
  for (int64_t g = 0; g * kPackRows < w.rows; ++g) {
    const uint8_t* grp = packed + gb * g;
    switch (w.dtype) {
      case DType::F32:
        (k ? k->gemm_f32_x16 : gemm_f32_x16_ref)(grp, w.cols, a.xf.data(), w.cols, R, tmp, kPackRows);
        break;
      case DType::F16:
        (k ? k->gemm_f16_x16 : gemm_f16_x16_ref)(grp, w.cols, a.xh.data(), w.cols, R, tmp, kPackRows);
        break;
      case DType::BF16:
        if (k)
          k->gemm_bf16_x16(grp, 1, gb, w.cols, a.xb.data(), w.cols, R, tmp, kPackRows);
        else
          gemm_bf16_x16_ref(grp, w.cols, a.xb.data(), w.cols, R, tmp, kPackRows);
        break;
      case DType::Q8_0:
        (k ? k->gemm_q8_0_x16 : gemm_q8_0_x16_ref)(grp, w.cols / kQK8_0, a.s8(), R, tmp, kPackRows);
        break;
      case DType::Q4_0:
        (k ? k->gemm_q4_0_x16 : gemm_q4_0_x16_ref)(grp, w.cols / kQK8_0, a.s8(), R, tmp, kPackRows);
        break;
      case DType::IQ4_NL:
        (k ? k->gemm_iq4_nl_x16 : gemm_iq4_nl_x16_ref)(grp, w.cols / kQK8_0, a.s8(), R, tmp, kPackRows);
        break;
      case DType::Q5_0:
        (k ? k->gemm_q5_0_x16 : gemm_q5_0_x16_ref)(grp, w.cols / kQK8_0, a.s8(), R, tmp, kPackRows);
        break;
      case DType::Q4_1:
        (k ? k->gemm_q4_1_x16 : gemm_q4_1_x16_ref)(grp, w.cols / kQK8_0, a.s8(), R, tmp, kPackRows);
        break;
      case DType::Q5_1:
        (k ? k->gemm_q5_1_x16 : gemm_q5_1_x16_ref)(grp, w.cols / kQK8_0, a.s8(), R, tmp, kPackRows);
        break;
      case DType::Q4_K:
        (k ? k->gemm_q4_k_x16 : gemm_q4_k_x16_ref)(grp, w.cols / kQK_K, a.k(), R, tmp, kPackRows);
        break;
      case DType::Q5_K:
        (k ? k->gemm_q5_k_x16 : gemm_q5_k_x16_ref)(grp, w.cols / kQK_K, a.k(), R, tmp, kPackRows);
        break;
      default: (k ? k->gemm_q6_k_x16 : gemm_q6_k_x16_ref)(grp, w.cols / kQK_K, a.k(), R, tmp, kPackRows); break;
    }
    for (int64_t t = 0; t < R; ++t)
      for (int64_t i = 0; i < kPackRows && g * kPackRows + i < w.rows; ++i)
        y[t * w.rows + g * kPackRows + i] = tmp[t * kPackRows + i];
  }
}

class PackedTypes : public ::testing::TestWithParam<DType> {};

TEST_P(PackedTypes, ReferenceEqualsExactDotWithinRoundingBound) {
  std::mt19937 rng(11);
  const DType t = GetParam();
  for (int64_t cols : {is_float(t) ? int64_t{257} : int64_t{256}, int64_t{512}, int64_t{2048}})
    for (bool unit : {true, false}) {
      const int64_t rows = 37, R = kPackMaxTokens;  // 37: two full groups and a partial one
      const Weights w = random_weights(t, rows, cols, rng, unit);
      const Acts a = random_acts(R, cols, rng, unit);
      const PackedBuffer p = pack_rows(w.m);
      ASSERT_TRUE(p) << dtype_name(t);
      std::vector<float> y(R * rows);
      run_packed(w.m, p.get(), a, R, y.data(), nullptr);
      for (int64_t tok = 0; tok < R; ++tok)
        for (int64_t r = 0; r < rows; ++r) {
          const Exact e = exact(w.m, r, a, tok);
          if (unit)
            EXPECT_EQ(double(y[tok * rows + r]), e.value) << dtype_name(t) << " cols " << cols << " row " << r;
          else
            EXPECT_LE(std::fabs(y[tok * rows + r] - e.value), gamma(cols) * e.mag)
                << dtype_name(t) << " cols " << cols << " row " << r;
        }
    }
}

TEST_P(PackedTypes, EveryTableKernelEqualsReferenceBitForBitForEveryTokenCount) {
  std::mt19937 rng(13);
  const DType t = GetParam();
  std::vector<const CpuKernels*> tables = {&generic_kernels()};
  if (avx2_kernels()) tables.push_back(avx2_kernels());
  if (avx_vnni_kernels() && cpu_has_avx_vnni()) tables.push_back(avx_vnni_kernels());
  __builtin_cpu_init();
  if (avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    tables.push_back(avx512_kernels());
  int tested = 0;
  for (const CpuKernels* k : tables) {
    const bool has = t == DType::F32      ? k->gemm_f32_x16 != nullptr
                     : t == DType::F16    ? k->gemm_f16_x16 != nullptr
                     : t == DType::BF16   ? k->gemm_bf16_x16 != nullptr
                     : t == DType::Q8_0   ? k->gemm_q8_0_x16 != nullptr
                     : t == DType::Q4_0   ? k->gemm_q4_0_x16 != nullptr
                     : t == DType::IQ4_NL ? k->gemm_iq4_nl_x16 != nullptr
                     : t == DType::Q5_0   ? k->gemm_q5_0_x16 != nullptr
                     : t == DType::Q4_1   ? k->gemm_q4_1_x16 != nullptr
                     : t == DType::Q5_1   ? k->gemm_q5_1_x16 != nullptr
                     : t == DType::Q4_K   ? k->gemm_q4_k_x16 != nullptr
                     : t == DType::Q5_K   ? k->gemm_q5_k_x16 != nullptr
                                          : k->gemm_q6_k_x16 != nullptr;
    if (!has) continue;
    ++tested;
    // An odd number of blocks too (the 32-element types' pair records end in a half record; 800 = 25 blocks).
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    const int64_t odd_blocks = is_float(t) ? 1001 : k_quant ? 1280 : 800;
    for (int64_t cols : {is_float(t) ? int64_t{257} : int64_t{256}, int64_t{768}, int64_t{2048}, odd_blocks}) {
      const int64_t rows = 40;
      const Weights w = random_weights(t, rows, cols, rng, false);
      const Acts a = random_acts(kPackMaxTokens, cols, rng, false);
      const PackedBuffer p = pack_rows(w.m);
      std::vector<float> want(kPackMaxTokens * rows), got(kPackMaxTokens * rows);
      run_packed(w.m, p.get(), a, kPackMaxTokens, want.data(), nullptr);
      for (int64_t R = 1; R <= kPackMaxTokens; ++R) {
        run_packed(w.m, p.get(), a, R, got.data(), k);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * R * rows))
            << k->isa << " " << dtype_name(t) << " cols " << cols << " R " << R;
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "no table on this CPU has a packed " << dtype_name(t) << " kernel";
}

// How far matmul on an unpacked Q4_1 / Q5_1 weight may be from the packed one beyond float rounding, per row for one
// token x: the row-major kernels take ggml's Q8_1 s = fp16(d_x·Σq) per block (relative error ≤ 2^-11, absolute
// ≤ 2^-25 below fp16's normal range), the packed ones d_x·Σq in float. Zero for the other types.
std::vector<double> min_term_slack(const WeightMatrix& w, const float* x) {
  std::vector<double> slack(w.rows, 0.0);
  if (w.dtype != DType::Q4_1 && w.dtype != DType::Q5_1) return slack;
  const int64_t nb = w.cols / kQK8_0;
  std::vector<int8_t> qs(w.cols);
  std::vector<float> d(nb);
  std::vector<int32_t> sums(nb);
  quantize_act_q8s_ref(x, qs.data(), d.data(), sums.data(), w.cols);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint16_t m = w.dtype == DType::Q4_1 ? reinterpret_cast<const BlockQ4_1*>(w.row(r))[b].m
                                                : reinterpret_cast<const BlockQ5_1*>(w.row(r))[b].m;
      slack[r] +=
          std::fabs(fp16_to_f32(m)) * (std::fabs(double(d[b]) * sums[b]) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25));
    }
  return slack;
}

// matmul through a packed weight: batch invariance, shared inputs (mixed with an unpacked partner), and agreement
// with the same weight unpacked.
TEST_P(PackedTypes, MatmulOnPackedWeightsIsBatchInvariantAndAgreesWithUnpacked) {
  const DType t = GetParam();
  if (!packable(t)) GTEST_SKIP() << "this CPU's kernel table runs " << dtype_name(t) << " unpacked";
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 512}, {300, 1024}}) {
    Weights plain = random_weights(t, rows, cols, rng, false);
    WeightMatrix packed = plain.m;
    const PackedBuffer owner = pack_weight(packed);
    ASSERT_TRUE(packed.packed);
    // Partners sharing the input: unpacked BF16 and Q6_K (Q8_K activations, as packed K-quants use), and another
    // packed K-quant (a Q4_K_M layer mixes packed Q4_K and Q6_K on one input).
    Weights other = random_weights(DType::BF16, 48, cols, rng, false);
    Weights q6 = random_weights(DType::Q6_K, 32, cols, rng, false);
    Weights pk = random_weights(t == DType::Q6_K ? DType::Q4_K : DType::Q6_K, 64, cols, rng, false);
    const PackedBuffer pk_owner = pack_weight(pk.m);
    for (int64_t T : {1, 2, 7, 8, 9, 17, 70}) {
      std::vector<float> x(T * cols), y(T * rows), yu(T * rows), y1(rows), yo(T * 48), ro(T * 48);
      for (auto& v : x) v = g(rng);
      matmul(x.data(), T, packed, y.data());
      matmul(x.data(), T, plain.m, yu.data());
      for (int64_t i = 0; i < T; ++i) {
        matmul(x.data() + i * cols, 1, packed, y1.data());
        ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + i * rows, sizeof(float) * rows))
            << "rows " << rows << " T " << T << " token " << i;
      }
      for (int64_t tok = 0; tok < T; ++tok) {
        const std::vector<double> slack = min_term_slack(plain.m, x.data() + tok * cols);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = tok * rows + r;
          EXPECT_NEAR(y[i], yu[i], 1e-4 * (1 + std::fabs(yu[i])) + slack[r]) << i;
        }
      }
      std::vector<float> ys(T * rows), y6(T * 32), r6(T * 32), yk(T * 64), rk(T * 64);
      matmul(x.data(), T, {{&pk.m, yk.data()}, {&packed, ys.data()}, {&q6.m, y6.data()}, {&other.m, yo.data()}});
      matmul(x.data(), T, other.m, ro.data()), matmul(x.data(), T, q6.m, r6.data()),
          matmul(x.data(), T, pk.m, rk.data());
      EXPECT_EQ(ys, y);
      EXPECT_EQ(yo, ro);
      EXPECT_EQ(y6, r6);
      EXPECT_EQ(yk, rk);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PackedWeightTypes, PackedTypes,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::IQ4_NL,
                                           DType::Q5_0, DType::Q4_1, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The packed F16 / BF16 input: every table's rounding equals the scalar round trip bit for bit (ties, denormals of
// both types, overflow, infinities; a NaN stays a NaN), for lengths with and without a vector tail.
TEST(Packed, RoundThroughHalfTablesEqualTheScalarRoundTrip) {
  std::mt19937 rng(23);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f + std::ldexp(1.0f, -11),
                          1.0f + 3 * std::ldexp(1.0f, -11),
                          1.0f + std::ldexp(1.0f, -8),
                          1.0f + 3 * std::ldexp(1.0f, -8),
                          std::ldexp(1.0f, -20),
                          -std::ldexp(3.0f, -25),
                          std::ldexp(1.0f, -130),
                          65519.0f,
                          65520.0f,
                          1e30f,
                          -1e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  while (x.size() < 1000) x.push_back(g(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20));
  std::vector<const CpuKernels*> tables;
  if (avx2_kernels()) tables.push_back(avx2_kernels());
  __builtin_cpu_init();
  if (avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    tables.push_back(avx512_kernels());
  for (const CpuKernels* k : tables)
    for (bool f16 : {true, false}) {
      auto round = f16 ? k->round_f16 : k->round_bf16;
      ASSERT_NE(round, nullptr) << k->isa;
      for (int64_t n : {int64_t{1000}, int64_t{999}, int64_t{7}}) {
        std::vector<float> want(n), got(n);
        round_through_half(x.data(), want.data(), n, f16);
        round(x.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(want[i])) {
            EXPECT_TRUE(std::isnan(got[i])) << k->isa << " " << i;
            continue;
          }
          uint32_t a, b;
          std::memcpy(&a, &want[i], 4), std::memcpy(&b, &got[i], 4);
          EXPECT_EQ(a, b) << k->isa << (f16 ? " f16 " : " bf16 ") << x[i];
        }
      }
    }
}

// The bf16 pair rows (AMX-BF16 tiles, and swapped for vdpbf16ps): each input rounded as f32_to_bf16 at its place,
// zeros up to a whole block, the two halves of every pair exchanged when swapped; a table's to_bf16 gives the same.
TEST(PackedBF16, PairActivationsHoldTheRowInTileOrderOrSwapped) {
  std::mt19937 rng(41);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t n : {int64_t{37}, int64_t{64}, int64_t{257}}) {
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng);
    const int64_t padded = bf16_blocks(n) * kBF16TileK;
    std::vector<uint16_t> plain(padded, 0xFFFF), swapped(padded, 0xFFFF), by_table(padded, 0xFFFF);
    bf16_pair_activations(x.data(), n, false, plain.data());
    bf16_pair_activations(x.data(), n, true, swapped.data());
    bf16_pair_activations(x.data(), n, true, by_table.data(), cpu_kernels().to_bf16);
    for (int64_t k = 0; k < padded; ++k) {
      EXPECT_EQ(plain[k], k < n ? f32_to_bf16(x[k]) : uint16_t{0}) << "n " << n << " k " << k;
      EXPECT_EQ(swapped[k], plain[k ^ 1]) << "n " << n << " k " << k;
    }
    EXPECT_EQ(swapped, by_table) << cpu_kernels().isa;
  }
}

// Where the CPU has AVX512_BF16: packed BF16 weights on vdpbf16ps (rotated weights, swapped activation pairs) equal
// the one-chain reference bit for bit, every token count, widths with a partial last block and an odd last input;
// the five full groups one per call and all in one call (a pass of four groups and a single), the partial one alone.
TEST(PackedBF16, Vdpbf16psKernelEqualsReferenceBitForBit) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (vdpbf16ps)";
  const CpuKernels& k = *avx512_bf16_kernels();
  ASSERT_NE(k.gemm_bf16_dp_x16, nullptr);
  std::mt19937 rng(43);
  for (int64_t cols : {int64_t{100}, int64_t{257}, int64_t{2048}}) {
    const int64_t rows = 16 * 5 + 7, full = 5, row = bf16_blocks(cols) * kBF16TileK;
    const Weights w = random_weights(DType::BF16, rows, cols, rng, false);
    const Acts a = random_acts(kPackMaxTokens, cols, rng, false);
    const PackedBuffer p = pack_rows(w.m);
    std::vector<uint16_t> xdp(kPackMaxTokens * row);
    for (int64_t t = 0; t < kPackMaxTokens; ++t)
      bf16_pair_activations(a.xf.data() + t * cols, cols, true, xdp.data() + t * row);
    std::vector<float> want(kPackMaxTokens * rows), got(want.size());
    run_packed(w.m, p.get(), a, kPackMaxTokens, want.data(), nullptr);
    const size_t gb = packed_group_bytes(DType::BF16, cols);
    for (int64_t R = 1; R <= kPackMaxTokens; ++R)
      for (int64_t per_call : {int64_t{1}, full}) {
        std::fill(got.begin(), got.end(), -1.0f);
        for (int64_t g = 0; g < full; g += per_call)
          k.gemm_bf16_dp_x16(p.get() + gb * g, per_call, gb, cols, xdp.data(), row, R, got.data() + g * kPackRows,
                             rows);
        float tmp[kPackMaxTokens * kPackRows];
        k.gemm_bf16_dp_x16(p.get() + gb * full, 1, gb, cols, xdp.data(), row, R, tmp, kPackRows);
        for (int64_t t = 0; t < R; ++t)
          for (int64_t i = 0; full * kPackRows + i < rows; ++i)
            got[t * rows + full * kPackRows + i] = tmp[t * kPackRows + i];
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * R * rows))
            << "cols " << cols << " R " << R << " groups a call " << per_call;
      }
  }
}

// The FMA kernels (AVX2, AVX-512) over several groups a call (one or two tokens take four groups a pass) equal the
// reference bit for bit, as they do one group a call.
TEST(PackedBF16, FmaKernelsOverSeveralGroupsEqualReferenceBitForBit) {
  __builtin_cpu_init();
  std::vector<const CpuKernels*> tables;
  if (avx2_kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    tables.push_back(avx2_kernels());
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni"))
    tables.push_back(avx512_kernels());
  if (tables.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  std::mt19937 rng(47);
  for (int64_t cols : {int64_t{257}, int64_t{2048}}) {
    const int64_t rows = 16 * 5, full = 5;
    const Weights w = random_weights(DType::BF16, rows, cols, rng, false);
    const Acts a = random_acts(kPackMaxTokens, cols, rng, false);
    const PackedBuffer p = pack_rows(w.m);
    std::vector<float> want(kPackMaxTokens * rows), got(want.size());
    run_packed(w.m, p.get(), a, kPackMaxTokens, want.data(), nullptr);
    const size_t gb = packed_group_bytes(DType::BF16, cols);
    for (const CpuKernels* k : tables)
      for (int64_t R = 1; R <= kPackMaxTokens; ++R) {
        std::fill(got.begin(), got.end(), -1.0f);
        k->gemm_bf16_x16(p.get(), full, gb, cols, a.xb.data(), cols, R, got.data(), rows);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * R * rows))
            << k->isa << " cols " << cols << " R " << R;
      }
  }
}

// What the kernel relies on, checked on the CPU itself: per fp32 lane, vdpbf16ps computes acc + x[2i+1]·w[2i+1] rounded
// to nearest even, then + x[2i]·w[2i] rounded again (Intel's SDM; denormal inputs read as zero, denormal results
// flushed), not the even product first, nor both products in one rounding. Inputs: random bits, cancellations around
// 1 (products of 1 and 2^−20.. and exact half-ulp ties), and values near the denormal range.
__attribute__((target("avx512f,avx512bf16"))) void dpbf16(const float* acc, const uint16_t* x, const uint16_t* w,
                                                          float* out) {
  __m512bh xv, wv;
  std::memcpy(&xv, x, 64), std::memcpy(&wv, w, 64);
  _mm512_storeu_ps(out, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), xv, wv));
}

float flush_denormal(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

// acc + a·b + c·d as two fmas (exact bf16 products), a·b first, inputs and each result through DAZ / FTZ.
float two_roundings(float acc, float a, float b, float c, float d) {
  const auto z = flush_denormal;
  return z(std::fma(z(c), z(d), z(std::fma(z(a), z(b), z(acc)))));
}

TEST(PackedBF16, Vdpbf16psAddsTheOddProductThenTheEvenOneRoundingEach) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "this CPU has no AVX512_BF16 (vdpbf16ps)";
  std::mt19937 rng(53);
  const auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  int64_t lanes = 0, even_first_differs = 0;
  for (int it = 0; it < 6000; ++it) {
    const int mode = it % 3;
    alignas(64) uint16_t x[32], w[32];
    alignas(64) float acc[16], got[16];
    for (int i = 0; i < 32; ++i) {
      const uint32_t r = rng();
      const auto exp_bits = [&](int e) { return static_cast<uint16_t>((r & 0x807F) | (e << 7)); };
      x[i] = mode == 0 ? static_cast<uint16_t>(r) : mode == 1 ? exp_bits(127) : exp_bits(static_cast<int>(r >> 20) % 4);
      w[i] = mode == 0   ? static_cast<uint16_t>(r >> 16)
             : mode == 1 ? (i % 2 ? exp_bits(127 - 8 - static_cast<int>(r >> 24) % 24) : exp_bits(127))
                         : exp_bits(60 + static_cast<int>(r >> 24) % 8);
    }
    for (int l = 0; l < 16; ++l) {
      const uint32_t r = rng();
      acc[l] = mode == 0   ? bits(r)
               : mode == 1 ? ((r & 1) ? 1.0f : -1.0f)
                           : bits((r & 0x807FFFFF) | ((r >> 23) % 3) << 23);
    }
    dpbf16(acc, x, w, got);
    for (int l = 0; l < 16; ++l) {
      const float x0 = bf16_to_f32(x[2 * l]), x1 = bf16_to_f32(x[2 * l + 1]);
      const float w0 = bf16_to_f32(w[2 * l]), w1 = bf16_to_f32(w[2 * l + 1]);
      const float want = two_roundings(acc[l], x1, w1, x0, w0);
      if (std::isnan(want) || std::isnan(got[l])) {
        EXPECT_EQ(std::isnan(want), std::isnan(got[l])) << "lane " << l << " mode " << mode;
        continue;
      }
      ++lanes;
      even_first_differs += two_roundings(acc[l], x0, w0, x1, w1) != want;
      ASSERT_EQ(std::memcmp(&want, &got[l], 4), 0) << "mode " << mode << " acc " << acc[l] << " x " << x0 << ", " << x1
                                                   << " w " << w0 << ", " << w1 << ": " << got[l] << " vs " << want;
    }
  }
  EXPECT_GT(lanes, 90000);
  EXPECT_GT(even_first_differs, lanes / 100);  // the inputs tell the two orders apart
}

// The one documented difference: vdpbf16ps reads a denormal bf16 as zero (the reference multiplies it).
TEST(PackedBF16, Vdpbf16psReadsDenormalsAsZeroWhereTheReferenceDoesNot) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (vdpbf16ps)";
  const int64_t n = 2;
  std::vector<uint8_t> grp(packed_group_bytes(DType::BF16, n), 0);
  const uint16_t denormal = 0x0001, one = 0x3F80;  // 2^−133, 1
  for (int i = 0; i < kPackRows; ++i) {
    std::memcpy(&grp[2 * packed_bf16_index(0, i)], &denormal, 2);
    std::memcpy(&grp[2 * packed_bf16_index(1, i)], &one, 2);
  }
  const float x[2] = {std::ldexp(1.0f, 100), std::ldexp(1.0f, -30)};  // 2^100 · 2^−133 = 2^−33, a normal product
  std::vector<uint16_t> xdp(kBF16TileK);
  bf16_pair_activations(x, n, true, xdp.data());
  float want[kPackRows], got[kPackRows];
  gemm_bf16_x16_ref(grp.data(), n, x, n, 1, want, kPackRows);
  avx512_bf16_kernels()->gemm_bf16_dp_x16(grp.data(), 1, grp.size(), n, xdp.data(), kBF16TileK, 1, got, kPackRows);
  EXPECT_EQ(want[0], std::ldexp(1.0f, -33) + std::ldexp(1.0f, -30));
  EXPECT_EQ(got[0], std::ldexp(1.0f, -30));
}

// The start-up choice: a CPU with AVX512_BF16 runs packed BF16 on the vdpbf16ps kernel unless KVIK_ISA caps it.
TEST(PackedBF16, CpuWithAvx512Bf16ChoosesTheVdpbf16psTable) {
  EXPECT_EQ(avx512_kernels()->gemm_bf16_dp_x16, nullptr);
  if (avx2_kernels()) EXPECT_EQ(avx2_kernels()->gemm_bf16_dp_x16, nullptr);
  EXPECT_EQ(generic_kernels().gemm_bf16_dp_x16, nullptr);
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (vdpbf16ps)";
  const char* force = std::getenv("KVIK_ISA");
  if (force && std::string(force) != "amx" && std::string(force) != "avx512_bf16")
    GTEST_SKIP() << "KVIK_ISA=" << force << " caps the kernels below avx512_bf16";
  const std::string isa(cpu_kernels().isa);
  EXPECT_NE(cpu_kernels().gemm_bf16_dp_x16, nullptr) << isa;
  EXPECT_EQ(isa.substr(isa.size() - std::string("+avx512_bf16").size()), "+avx512_bf16") << isa;
}

// quantize_act_q8s of table k against the reference: q, d and Σq equal, with rounding ties and an all-zero block.
void quantize_act_q8s_matches_reference(const CpuKernels& k) {
  std::mt19937 rng(19);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (int64_t nb : {1, 2, 3, 8, 64}) {
    const int64_t n = nb * kQK8_0;
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng);
    x[0] = 127.0f;  // d = 1: k + ½ values are exact rounding ties
    for (int j = 1; j < kQK8_0; ++j) x[j] = static_cast<float>(j % 9 - 4) + (j % 2 ? 0.5f : -0.5f);
    if (nb > 1) std::fill(x.begin() + kQK8_0, x.begin() + 2 * kQK8_0, 0.0f);
    std::vector<int8_t> q0(n), q1(n);
    std::vector<float> d0(nb), d1(nb);
    std::vector<int32_t> s0(nb), s1(nb);
    quantize_act_q8s_ref(x.data(), q0.data(), d0.data(), s0.data(), n);
    k.quantize_act_q8s(x.data(), q1.data(), d1.data(), s1.data(), n);
    EXPECT_EQ(q0, q1) << k.isa << " nb " << nb;
    EXPECT_EQ(0, std::memcmp(d0.data(), d1.data(), sizeof(float) * nb)) << k.isa << " nb " << nb;
    EXPECT_EQ(s0, s1) << k.isa << " nb " << nb;
  }
}

TEST(Packed, QuantizeActQ8SIsBitExactIncludingTiesAndZeroBlocks) {
  std::vector<const CpuKernels*> tables;
  __builtin_cpu_init();
  if (avx2_kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    tables.push_back(avx2_kernels());
  if (avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    tables.push_back(avx512_kernels());
  if (tables.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  for (const CpuKernels* k : tables) quantize_act_q8s_matches_reference(*k);
}
}  // namespace
