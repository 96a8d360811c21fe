// Every entry of every compiled kernel table against the generic (scalar reference) table, on random inputs of
// many lengths, tails included. Tables this CPU cannot run are skipped.
//
// Bounds: integer parts are exact (tested with unit scales, where the whole result is an exactly representable
// integer); conversions (quantize_act_q8, to_f16, to_bf16) are bit-exact; float sums may differ only by summation
// order, so |fast − ref| ≤ γ·Σ|terms| with γ = (n + 64)·2⁻²⁴ (the classic worst-case bound for n additions,
// plus slack for the per-lane partial sums).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/fp16.h"
#include "kernel_tables.h"
#include "kernels/cpu/cpu_kernels.h"

using namespace kvik;

namespace {

using test::Table;
using test::tables;

class KernelTable : public ::testing::TestWithParam<Table> {
 protected:
  void SetUp() override {
    if (!GetParam().runnable) GTEST_SKIP() << GetParam().name << " table: this CPU lacks the instructions";
  }
  const CpuKernels& fast() const { return *GetParam().k; }
  const CpuKernels& ref() const { return generic_kernels(); }
  std::mt19937 rng{1234};
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }
};

double gamma(int64_t n) { return static_cast<double>(n + 64) * std::ldexp(1.0, -24); }

const std::vector<int64_t> kLengths = [] {
  std::vector<int64_t> v;
  for (int64_t n = 1; n <= 80; ++n) v.push_back(n);
  for (int64_t n : {95, 96, 127, 128, 129, 255, 256, 257, 1000, 2048, 4099}) v.push_back(n);
  return v;
}();

TEST_P(KernelTable, DotF32MatchesReferenceWithinSummationBound) {
  for (int64_t n : kLengths) {
    std::vector<float> w(n), x(n);
    double abs_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      w[i] = normal(), x[i] = normal();
      abs_sum += std::fabs(static_cast<double>(w[i]) * x[i]);
    }
    const float r = ref().dot_f32(w.data(), x.data(), n), f = fast().dot_f32(w.data(), x.data(), n);
    EXPECT_LE(std::fabs(static_cast<double>(f) - r), gamma(n) * abs_sum) << "n=" << n;
  }
}

TEST_P(KernelTable, DotF16AndBf16MatchReferenceWithinSummationBound) {
  for (int64_t n : kLengths) {
    std::vector<uint16_t> wh(n), xh(n), wb(n), xb(n);
    double abs_h = 0, abs_b = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float a = normal(), b = normal();
      wh[i] = f32_to_fp16(a), xh[i] = f32_to_fp16(b), wb[i] = f32_to_bf16(a), xb[i] = f32_to_bf16(b);
      abs_h += std::fabs(static_cast<double>(fp16_to_f32(wh[i])) * fp16_to_f32(xh[i]));
      abs_b += std::fabs(static_cast<double>(bf16_to_f32(wb[i])) * bf16_to_f32(xb[i]));
    }
    EXPECT_LE(std::fabs(static_cast<double>(fast().dot_f16(wh.data(), xh.data(), n)) -
                        ref().dot_f16(wh.data(), xh.data(), n)),
              gamma(n) * abs_h)
        << "n=" << n;
    EXPECT_LE(std::fabs(static_cast<double>(fast().dot_bf16(wb.data(), xb.data(), n)) -
                        ref().dot_bf16(wb.data(), xb.data(), n)),
              gamma(n) * abs_b)
        << "n=" << n;
  }
}

TEST_P(KernelTable, AttentionKernelsMatchReference) {
  for (int64_t n : {1, 7, 16, 31, 32, 33, 64, 80, 128, 130, 256}) {
    std::vector<float> x(n), y0(n), y1(n), xf(n);
    std::vector<uint16_t> h(n);
    double abs_dot = 0;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = normal(), h[i] = f32_to_fp16(normal()), xf[i] = normal(), y0[i] = y1[i] = normal();
      abs_dot += std::fabs(double(x[i]) * fp16_to_f32(h[i]));
    }
    EXPECT_LE(std::fabs(double(fast().dot_f32_f16(x.data(), h.data(), n)) - ref().dot_f32_f16(x.data(), h.data(), n)),
              gamma(n) * abs_dot)
        << "n=" << n;
  }
  // Scores of one query row against scattered key rows (f32 and f16 cache): |fast − ref| ≤ γ(d)·Σ|q·k|·scale, for
  // key counts below, at and past the 16-row tree and head dims with a partial last vector (AVX2: 8-wide, so 12 and 20
  // end in scalar elements).
  for (int64_t d : {12, 16, 20, 40, 64, 128})
    for (int64_t keys : {1, 15, 16, 17, 33, 64, 100}) {
      const int64_t rows = keys + 7;
      std::vector<float> q(d), kf(rows * d), s0(keys), s1(keys);
      std::vector<uint16_t> kh(rows * d);
      for (auto& v : q) v = normal();
      for (size_t i = 0; i < kf.size(); ++i) kf[i] = normal(), kh[i] = f32_to_fp16(kf[i]);
      std::vector<int64_t> off(keys);
      for (int64_t j = 0; j < keys; ++j) off[j] = ((j * 5) % rows) * d;
      const float scale = 0.125f;
      for (int f16 = 0; f16 < 2; ++f16) {
        if (f16)
          ref().scores_f16(q.data(), kh.data(), off.data(), keys, d, scale, s0.data()),
              fast().scores_f16(q.data(), kh.data(), off.data(), keys, d, scale, s1.data());
        else
          ref().scores_f32(q.data(), kf.data(), off.data(), keys, d, scale, s0.data()),
              fast().scores_f32(q.data(), kf.data(), off.data(), keys, d, scale, s1.data());
        for (int64_t j = 0; j < keys; ++j) {
          double mag = 0;
          for (int64_t i = 0; i < d; ++i)
            mag += std::fabs(double(q[i]) * (f16 ? fp16_to_f32(kh[off[j] + i]) : kf[off[j] + i]));
          EXPECT_LE(std::fabs(double(s0[j]) - s1[j]), gamma(d) * mag * scale)
              << "f16=" << f16 << " d=" << d << " keys=" << keys << " j=" << j;
        }
      }
    }
  // Weighted sums of value rows at scattered offsets, head dims with and without a partial last vector and above
  // one 128-float register chunk; |fast − ref| ≤ γ(keys)·Σ|p·v|.
  for (int64_t d : {16, 32, 40, 64, 128, 130, 256})
    for (int64_t keys : {1, 5, 64, 300}) {
      const int64_t rows = keys + 7;
      std::vector<float> v(rows * d), p(keys), o0(d), o1(d);
      std::vector<uint16_t> vh(rows * d);
      for (size_t i = 0; i < v.size(); ++i) v[i] = normal(), vh[i] = f32_to_fp16(v[i]);
      for (auto& x : p) x = std::fabs(normal());
      std::vector<int64_t> off(keys);
      for (int64_t j = 0; j < keys; ++j) off[j] = ((j * 5) % rows) * d;  // scattered, like paged blocks
      for (int f16 = 0; f16 < 2; ++f16) {
        if (f16)
          ref().wsum_f16(p.data(), vh.data(), off.data(), keys, d, o0.data()),
              fast().wsum_f16(p.data(), vh.data(), off.data(), keys, d, o1.data());
        else
          ref().wsum_f32(p.data(), v.data(), off.data(), keys, d, o0.data()),
              fast().wsum_f32(p.data(), v.data(), off.data(), keys, d, o1.data());
        for (int64_t i = 0; i < d; ++i) {
          double mag = 0;
          for (int64_t j = 0; j < keys; ++j)
            mag += std::fabs(double(p[j]) * (f16 ? fp16_to_f32(vh[off[j] + i]) : v[off[j] + i]));
          EXPECT_LE(std::fabs(double(o0[i]) - o1[i]), gamma(keys) * mag) << "d=" << d << " keys=" << keys << " i=" << i;
        }
      }
    }
  // Softmax (the fast tables use a polynomial e^x): each probability within 4e-7 relative plus 1e-9 absolute, and
  // the row sums to 1; large negative gaps underflow to 0 without NaN.
  for (int64_t n : {1, 7, 16, 17, 100, 1000}) {
    std::vector<float> x(n);
    for (auto& v : x) v = normal() * 8.0f;
    if (n > 2) x[1] = -1e30f;
    std::vector<float> a = x, b = x;
    ref().softmax(a.data(), n), fast().softmax(b.data(), n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(b[i], a[i], 4e-7 * a[i] + 1e-9) << "n=" << n << " i=" << i;
      sum += b[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "n=" << n;
  }
  // silu(g)·u: within 1e-6 relative of the reference (e^x polynomial), saturating cleanly at large |g|.
  for (int64_t n : {1, 15, 16, 33, 1000}) {
    std::vector<float> g(n), u(n);
    for (int64_t i = 0; i < n; ++i) g[i] = normal() * 6.0f, u[i] = normal();
    if (n > 3) g[0] = 200.0f, g[1] = -200.0f, g[2] = 0.0f;
    std::vector<float> a = g, b = g;
    ref().silu_mul(a.data(), u.data(), n), fast().silu_mul(b.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(b[i], a[i], 1e-6 * std::fabs(a[i]) + 1e-30) << "n=" << n << " i=" << i;
  }
}

// Random blocks: int8 in [-127, 127] (what quantize_q8_0 produces), nibbles 0..15, fp16 scales.
void fill_q8_0(std::mt19937& rng, std::vector<BlockQ8_0>& b, bool unit_scale) {
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> d(0.001f, 0.1f);
  for (auto& blk : b) {
    blk.d = f32_to_fp16(unit_scale ? 1.0f : d(rng));
    for (auto& v : blk.qs) v = static_cast<int8_t>(q(rng));
  }
}
void fill_q4_0(std::mt19937& rng, std::vector<BlockQ4_0>& b, bool unit_scale) {
  std::uniform_int_distribution<int> q(0, 255);
  std::uniform_real_distribution<float> d(-0.1f, 0.1f);
  for (auto& blk : b) {
    blk.d = f32_to_fp16(unit_scale ? 1.0f : d(rng));
    for (auto& v : blk.qs) v = static_cast<uint8_t>(q(rng));
  }
}

const std::vector<int64_t> kBlockCounts = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 129};

// Activation rows in the ActQ8 layout from BlockQ8_0 blocks (q + 128 at act_q8_offset, d as float).
struct Act {
  std::vector<uint8_t> qs;
  std::vector<float> d;
  int64_t nb;
  ActQ8 view() const { return {qs.data(), d.data(), nb}; }
};
Act to_act(const std::vector<BlockQ8_0>& x, int64_t rows, int64_t nb) {
  Act a{std::vector<uint8_t>(rows * nb * kQK8_0), std::vector<float>(rows * nb), nb};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_0& blk = x[r * nb + b];
      a.d[r * nb + b] = fp16_to_f32(blk.d);
      for (int j = 0; j < kQK8_0; ++j)
        a.qs[r * nb * kQK8_0 + act_q8_offset(nb, b, j)] = static_cast<uint8_t>(blk.qs[j] + 128);
    }
  return a;
}

// Σ |w·x·d_w·d_x| over all elements of one row: the scale of the float rounding bound.
template <typename Block>
double abs_terms(const std::vector<Block>& w, const std::vector<BlockQ8_0>& x, int64_t row, int64_t nb) {
  double s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0& xb = x[row * nb + b];
    for (int j = 0; j < kQK8_0; ++j) {
      int q;
      if constexpr (std::is_same_v<Block, BlockQ8_0>)
        q = w[b].qs[j];
      else
        q = (j < 16 ? (w[b].qs[j] & 15) : (w[b].qs[j - 16] >> 4)) - 8;
      s += std::fabs(double(q) * xb.qs[j] * fp16_to_f32(w[b].d) * fp16_to_f32(xb.d));
    }
  }
  return s;
}

// For every R: the integer part is exact (unit scales), the scaled sum within the rounding bound, and row r's
// result does not depend on R (bit for bit what R = 1 gives).
template <typename Block>
void check_gemv(std::mt19937& rng, const CpuKernels& fast, const CpuKernels& ref,
                void (*fill)(std::mt19937&, std::vector<Block>&, bool),
                void (*CpuKernels::*entry)(const Block*, const ActQ8&, int64_t, float*)) {
  for (int64_t nb : kBlockCounts)
    for (bool unit : {true, false}) {
      std::vector<Block> w(nb);
      std::vector<BlockQ8_0> x(kActQ8MaxRows * nb);
      fill(rng, w, unit), fill_q8_0(rng, x, unit);
      const Act a = to_act(x, kActQ8MaxRows, nb);
      float want[kActQ8MaxRows], alone[kActQ8MaxRows], got[kActQ8MaxRows];
      (ref.*entry)(w.data(), a.view(), kActQ8MaxRows, want);
      for (int64_t r = 0; r < kActQ8MaxRows; ++r) {
        const Act one = to_act(std::vector<BlockQ8_0>(x.begin() + r * nb, x.begin() + (r + 1) * nb), 1, nb);
        (fast.*entry)(w.data(), one.view(), 1, &alone[r]);
      }
      for (int64_t R = 1; R <= kActQ8MaxRows; ++R) {
        (fast.*entry)(w.data(), a.view(), R, got);
        for (int64_t r = 0; r < R; ++r) {
          if (unit)
            EXPECT_EQ(got[r], want[r]) << "nb=" << nb << " R=" << R << " r=" << r;
          else
            EXPECT_LE(std::fabs(double(got[r]) - want[r]), gamma(nb * kQK8_0) * abs_terms(w, x, r, nb))
                << "nb=" << nb << " R=" << R << " r=" << r;
          EXPECT_EQ(got[r], alone[r]) << "batch invariance: nb=" << nb << " R=" << R << " r=" << r;
        }
      }
    }
}

// Scores of several queries against the same scattered keys (f32 and f16 cache): within the summation bound of the
// reference, and a query's scores are bit for bit the same computed alone, among 9 queries, or with the key range
// started elsewhere (what keeps attention batch-invariant when rows are scored together). Head dims: whole 8- and
// 16-wide vectors (the transposed paths), 256 (the most the AVX2 and AVX-512 kernels transpose), and 12 and 264
// (their per-query fallbacks); 9 queries = two groups of 4 and one alone.
TEST_P(KernelTable, MultiQueryScoresMatchReferenceAndDoNotDependOnTheTile) {
  for (int64_t d : {8, 12, 16, 24, 40, 64, 128, 256, 264})
    for (int64_t keys : {1, 15, 16, 17, 33, 100}) {
      const int64_t rows = keys + 7, nq = 9;
      std::vector<float> q(nq * d), kf(rows * d), s0(nq * keys), s1(nq * keys), alone(keys), shifted(keys + 3);
      std::vector<uint16_t> kh(rows * d);
      for (auto& v : q) v = normal();
      for (size_t i = 0; i < kf.size(); ++i) kf[i] = normal(), kh[i] = f32_to_fp16(kf[i]);
      std::vector<int64_t> off(keys + 3);
      for (int64_t j = 0; j < keys + 3; ++j) off[j] = ((j * 5) % rows) * d;
      const float scale = 0.125f;
      for (int f16 = 0; f16 < 2; ++f16) {
        auto multi = [&](const CpuKernels& t, const float* qq, int64_t n_q, const int64_t* o, int64_t n, float* out) {
          if (f16)
            t.scores_multi_f16(qq, d, n_q, kh.data(), o, n, d, scale, out, n);
          else
            t.scores_multi_f32(qq, d, n_q, kf.data(), o, n, d, scale, out, n);
        };
        multi(ref(), q.data(), nq, off.data() + 3, keys, s0.data());
        multi(fast(), q.data(), nq, off.data() + 3, keys, s1.data());
        for (int64_t i = 0; i < nq; ++i) {
          for (int64_t j = 0; j < keys; ++j) {
            double mag = 0;
            for (int64_t c = 0; c < d; ++c)
              mag += std::fabs(double(q[i * d + c]) * (f16 ? fp16_to_f32(kh[off[3 + j] + c]) : kf[off[3 + j] + c]));
            EXPECT_LE(std::fabs(double(s0[i * keys + j]) - s1[i * keys + j]), gamma(d) * mag * scale)
                << "f16=" << f16 << " d=" << d << " keys=" << keys << " q=" << i << " j=" << j;
          }
          multi(fast(), q.data() + i * d, 1, off.data() + 3, keys, alone.data());
          multi(fast(), q.data() + i * d, 1, off.data(), keys + 3, shifted.data());
          for (int64_t j = 0; j < keys; ++j) {
            EXPECT_EQ(alone[j], s1[i * keys + j]) << "alone vs among 9: d=" << d << " q=" << i << " j=" << j;
            EXPECT_EQ(shifted[j + 3], s1[i * keys + j]) << "range started 3 keys earlier: d=" << d << " j=" << j;
          }
        }
      }
    }
}

// Value sums of several queries over the same scattered value rows: within the reference's bound, and a query's sum
// is bit for bit the same computed alone or among 7 (AVX2: a group of 4, a pair and one alone; d 8 and 24 end in an
// 8-column block, 12 and 20 take the per-query fallback).
TEST_P(KernelTable, MultiQueryValueSumsMatchReferenceAndDoNotDependOnTheTile) {
  for (int64_t d : {8, 12, 16, 20, 24, 40, 64, 128, 192})
    for (int64_t keys : {1, 5, 64, 130}) {
      const int64_t rows = keys + 7, nq = 7;
      std::vector<float> v(rows * d), p(nq * keys), o0(nq * d), o1(nq * d), alone(d);
      std::vector<uint16_t> vh(rows * d);
      for (size_t i = 0; i < v.size(); ++i) v[i] = normal(), vh[i] = f32_to_fp16(v[i]);
      for (auto& x : p) x = std::fabs(normal()) / static_cast<float>(keys);
      std::vector<int64_t> off(keys);
      for (int64_t j = 0; j < keys; ++j) off[j] = ((j * 3) % rows) * d;
      for (int f16 = 0; f16 < 2; ++f16) {
        auto multi = [&](const CpuKernels& t, const float* pp, int64_t n_q, float* out) {
          if (f16)
            t.wsum_multi_f16(pp, keys, n_q, vh.data(), off.data(), keys, d, out, d);
          else
            t.wsum_multi_f32(pp, keys, n_q, v.data(), off.data(), keys, d, out, d);
        };
        multi(ref(), p.data(), nq, o0.data());
        multi(fast(), p.data(), nq, o1.data());
        for (int64_t i = 0; i < nq; ++i) {
          multi(fast(), p.data() + i * keys, 1, alone.data());
          for (int64_t c = 0; c < d; ++c) {
            double mag = 0;
            for (int64_t j = 0; j < keys; ++j)
              mag += std::fabs(double(p[i * keys + j]) * (f16 ? fp16_to_f32(vh[off[j] + c]) : v[off[j] + c]));
            EXPECT_LE(std::fabs(double(o0[i * d + c]) - o1[i * d + c]), gamma(keys) * mag)
                << "f16=" << f16 << " d=" << d << " keys=" << keys << " q=" << i << " c=" << c;
            EXPECT_EQ(alone[c], o1[i * d + c]) << "alone vs among 7: d=" << d << " q=" << i << " c=" << c;
          }
        }
      }
    }
}

// The next chunk's rows handed to a multi-query call (AttentionPrefetch), for each cache type: the scores and value
// sums are bit for bit the ones without, a table that spreads any type's rows takes the hand-over in every kernel (its
// paths that do not spread prefetch it at once) and other tables leave it, and a hand-over longer or shorter than
// the call's keys reads no entry outside its array (ASan).
template <typename KV>
using ScoresMulti = void (*)(const float*, int64_t, int64_t, const KV*, const int64_t*, int64_t, int64_t, float, float*,
                             int64_t);
template <typename KV>
using WsumMulti = void (*)(const float*, int64_t, int64_t, const KV*, const int64_t*, int64_t, int64_t, float*,
                           int64_t);

template <typename KV>
void check_prefetch_hand_over(const CpuKernels& t, ScoresMulti<KV> scores, WsumMulti<KV> wsum,
                              const std::function<void(KV*, int64_t)>& fill, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t d : {8, 24, 64, 128})
    for (int64_t keys : {1, 16, 40, 64})
      for (int64_t pf_rows : {int64_t{0}, int64_t{1}, keys, int64_t{64}}) {
        const int64_t rows = 128, nq = 7;
        const int64_t elems = std::is_same_v<KV, BlockQ8_0> ? rows * d / 32 : rows * d;  // rows · d is whole blocks
        std::vector<float> q(nq * d), p(nq * keys), s0(nq * keys), s1(nq * keys), o0(nq * d), o1(nq * d);
        std::vector<KV> kc(elems), vc(elems);
        for (auto& v : q) v = normal(rng);
        for (auto& v : p) v = std::fabs(normal(rng));
        fill(kc.data(), elems), fill(vc.data(), elems);
        std::vector<int64_t> off(keys), next(pf_rows);
        for (int64_t j = 0; j < keys; ++j) off[j] = ((j * 7) % rows) * d;
        for (int64_t j = 0; j < pf_rows; ++j) next[j] = ((j * 3 + 1) % rows) * d;
        const int64_t left = t.spreads_attention_prefetch != 0 ? 0 : pf_rows;
        const std::string at =
            "d=" + std::to_string(d) + " keys=" + std::to_string(keys) + " prefetched rows=" + std::to_string(pf_rows);
        scores(q.data(), d, nq, kc.data(), off.data(), keys, d, 0.125f, s0.data(), keys);
        wsum(p.data(), keys, nq, vc.data(), off.data(), keys, d, o0.data(), d);
        t_attention_prefetch = AttentionPrefetch{kc.data(), next.data(), pf_rows};
        scores(q.data(), d, nq, kc.data(), off.data(), keys, d, 0.125f, s1.data(), keys);
        EXPECT_EQ(t_attention_prefetch.n, left) << "scores: " << at;
        t_attention_prefetch = AttentionPrefetch{vc.data(), next.data(), pf_rows};
        wsum(p.data(), keys, nq, vc.data(), off.data(), keys, d, o1.data(), d);
        EXPECT_EQ(t_attention_prefetch.n, left) << "value sums: " << at;
        t_attention_prefetch = AttentionPrefetch{};
        EXPECT_EQ(0, std::memcmp(s0.data(), s1.data(), s0.size() * sizeof(float))) << "scores: " << at;
        EXPECT_EQ(0, std::memcmp(o0.data(), o1.data(), o0.size() * sizeof(float))) << "value sums: " << at;
      }
}

TEST_P(KernelTable, AttentionPrefetchHandOverChangesNoResult) {
  const CpuKernels& t = fast();
  check_prefetch_hand_over<float>(
      t, t.scores_multi_f32, t.wsum_multi_f32,
      [&](float* c, int64_t n) { std::generate_n(c, n, [&] { return normal(); }); }, rng);
  check_prefetch_hand_over<uint16_t>(
      t, t.scores_multi_f16, t.wsum_multi_f16,
      [&](uint16_t* c, int64_t n) { std::generate_n(c, n, [&] { return f32_to_fp16(normal()); }); }, rng);
  check_prefetch_hand_over<BlockQ8_0>(
      t, t.scores_multi_q8_0, t.wsum_multi_q8_0,
      [&](BlockQ8_0* c, int64_t n) {
        for (int64_t b = 0; b < n; ++b) {
          c[b].d = f32_to_fp16(0.01f + std::fabs(normal()) * 0.01f);
          for (auto& x : c[b].qs) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        }
      },
      rng);
  check_prefetch_hand_over<uint8_t>(  // FP8 E4M3 codes, NaN (0x7F, 0xFF) left out
      t, t.scores_multi_fp8, t.wsum_multi_fp8,
      [&](uint8_t* c, int64_t n) {
        for (int64_t i = 0; i < n; ++i) c[i] = static_cast<uint8_t>(rng() % 0x7F) | (rng() % 2 ? 0x80 : 0);
      },
      rng);
}

TEST_P(KernelTable, GemvQ8_0ExactIntegersBoundedSumsAndIndependentOfR) {
  check_gemv<BlockQ8_0>(rng, fast(), ref(), fill_q8_0, &CpuKernels::gemv_q8_0);
}
TEST_P(KernelTable, GemvQ4_0ExactIntegersBoundedSumsAndIndependentOfR) {
  check_gemv<BlockQ4_0>(rng, fast(), ref(), fill_q4_0, &CpuKernels::gemv_q4_0);
}

// quantize_act_q8 gives quantize_row_q8_0's q and d bit for bit, in the ActQ8 layout.
TEST_P(KernelTable, QuantizeActQ8IsBitExactIncludingRoundingTies) {
  for (int64_t nb : kBlockCounts) {
    const int64_t n = nb * kQK8_0;
    std::vector<float> x(n);
    for (auto& v : x) v = normal() * 3.0f;
    // Block 0: amax 127 makes d = 1 and id = 1, so k + ½ values are exact rounding ties (roundf: away from 0).
    x[0] = 127.0f;
    for (int j = 1; j < kQK8_0; ++j) x[j] = static_cast<float>(j % 9 - 4) + (j % 2 ? 0.5f : -0.5f);
    if (nb > 1)
      for (int j = 0; j < kQK8_0; ++j) x[kQK8_0 + j] = 0.0f;  // all-zero block: d = 0, id = 0
    std::vector<BlockQ8_0> blocks(nb);
    quantize_row(DType::Q8_0, x.data(), blocks.data(), n);
    const Act want = to_act(blocks, 1, nb);
    Act got{std::vector<uint8_t>(n), std::vector<float>(nb), nb};
    fast().quantize_act_q8(x.data(), got.qs.data(), got.d.data(), n);
    EXPECT_EQ(want.qs, got.qs) << "nb=" << nb;
    EXPECT_EQ(0, std::memcmp(want.d.data(), got.d.data(), sizeof(float) * nb)) << "nb=" << nb;
  }
}

TEST_P(KernelTable, HalfConversionsAreBitExact) {
  std::vector<float> x;
  for (int i = 0; i < 3000; ++i) x.push_back(normal() * std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30));
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e9f, -1e9f, 6e-8f, 3e-8f, 1e-40f, -1e-41f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(15), int64_t(17), int64_t(33)}) {
    std::vector<uint16_t> a(n), b(n);
    ref().to_f16(x.data(), a.data(), n), fast().to_f16(x.data(), b.data(), n);
    EXPECT_EQ(a, b) << "f16 n=" << n;
    ref().to_bf16(x.data(), a.data(), n), fast().to_bf16(x.data(), b.data(), n);
    EXPECT_EQ(a, b) << "bf16 n=" << n;
  }
}

// K-quant weight blocks from random bytes (every bit pattern of qs/qh/scales is valid) with finite fp16 scales, and
// Q8_K activations quantized from Gaussian floats.
template <typename Block>
std::vector<Block> random_k_blocks(std::mt19937& rng, int64_t nb) {
  std::vector<Block> b(nb);
  auto* p = reinterpret_cast<uint8_t*>(b.data());
  for (size_t i = 0; i < sizeof(Block) * nb; ++i) p[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> d(0.0005f, 0.05f);
  for (auto& blk : b) {
    blk.d = f32_to_fp16(d(rng));
    if constexpr (!std::is_same_v<Block, BlockQ6_K>) blk.dmin = f32_to_fp16(d(rng));
  }
  return b;
}

// Σ |w_i·x_i| of the dequantized rows: the scale of the float rounding bound for a K-quant dot.
template <typename Block>
double k_abs_terms(DType t, const std::vector<Block>& w, const std::vector<BlockQ8_K>& x, int64_t nb) {
  std::vector<float> wd(nb * kQK_K), xd(nb * kQK_K);
  dequantize_row(t, w.data(), wd.data(), nb * kQK_K);
  dequantize_row(DType::Q8_K, x.data(), xd.data(), nb * kQK_K);
  double s = 0;
  for (int64_t i = 0; i < nb * kQK_K; ++i) s += std::fabs(double(wd[i]) * xd[i]);
  return s;
}

// quantize_q8_k equals quantize_row_q8_k bit for bit where the vector code has its own paths: the first of two
// equal magnitudes sets the sign, products halfway between integers round to even, an all-zero block, a block with
// ±inf (NaN products, which the reference's int8 truncation turns into 0), NaNs skipped by the amax search.
TEST_P(KernelTable, QuantizeQ8KEqualsTheReferenceOnEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> blocks;
  auto block = [&](auto fill) {
    std::vector<float> x(kQK_K);
    for (auto& v : x) v = normal();
    fill(x);
    blocks.push_back(x);
  };
  block([](auto& x) { x[40] = 3.0f, x[200] = -3.0f; });  // first wins: +3
  block([](auto& x) { x[7] = -5.0f, x[9] = 5.0f; });     // first wins: −5
  block([](auto& x) {                                    // iscale = −1: every x.5 is a tie
    for (int j = 0; j < kQK_K; ++j) x[j] = std::fmod(j * 0.5f, 127.0f) - 63.0f;
    x[0] = -127.0f;
  });
  block([](auto& x) { std::fill(x.begin(), x.end(), 0.0f); });
  block([](auto& x) { std::fill(x.begin(), x.end(), -0.0f); });
  block([&](auto& x) { x[100] = inf; });
  block([&](auto& x) { x[3] = -inf, x[50] = inf; });
  block([&](auto& x) { x[0] = nan, x[130] = nan, x[255] = 9.0f; });
  block([](auto& x) { x[255] = -1e-30f; });
  for (size_t i = 0; i < blocks.size(); ++i) {
    BlockQ8_K got{}, want{};
    fast().quantize_q8_k(blocks[i].data(), &got, kQK_K);
    ref().quantize_q8_k(blocks[i].data(), &want, kQK_K);
    EXPECT_EQ(0, std::memcmp(&got, &want, sizeof(BlockQ8_K))) << "block " << i;
    EXPECT_EQ(std::memcmp(&got.d, &want.d, sizeof(float)), 0) << "block " << i << ": d " << got.d << " vs " << want.d;
  }
}

// quantize_q8_k is bit-exact; the dots' integer parts are exact everywhere (each block's sums are exact int32) and
// only the order of the float combination across blocks and lanes differs, so the fast tables agree with the
// reference within the summation bound.
TEST_P(KernelTable, KQuantDotsMatchReferenceWithinSummationBound) {
  for (int64_t nb : {1, 2, 3, 8, 9, 32}) {
    std::vector<float> xf(nb * kQK_K);
    for (auto& v : xf) v = normal();
    xf[5] = 0.0f;
    std::vector<BlockQ8_K> x(nb);
    fast().quantize_q8_k(xf.data(), x.data(), nb * kQK_K);
    std::vector<BlockQ8_K> xr(nb);
    ref().quantize_q8_k(xf.data(), xr.data(), nb * kQK_K);
    EXPECT_EQ(0, std::memcmp(x.data(), xr.data(), sizeof(BlockQ8_K) * nb)) << "quantize_q8_k nb=" << nb;
    const auto w4 = random_k_blocks<BlockQ4_K>(rng, nb);
    const auto w5 = random_k_blocks<BlockQ5_K>(rng, nb);
    const auto w6 = random_k_blocks<BlockQ6_K>(rng, nb);
    const double bound = gamma(nb * kQK_K);
    EXPECT_LE(std::fabs(double(fast().dot_q4_k(w4.data(), x.data(), nb)) - ref().dot_q4_k(w4.data(), x.data(), nb)),
              bound * k_abs_terms(DType::Q4_K, w4, x, nb))
        << "q4_K nb=" << nb;
    EXPECT_LE(std::fabs(double(fast().dot_q5_k(w5.data(), x.data(), nb)) - ref().dot_q5_k(w5.data(), x.data(), nb)),
              bound * k_abs_terms(DType::Q5_K, w5, x, nb))
        << "q5_K nb=" << nb;
    EXPECT_LE(std::fabs(double(fast().dot_q6_k(w6.data(), x.data(), nb)) - ref().dot_q6_k(w6.data(), x.data(), nb)),
              bound * k_abs_terms(DType::Q6_K, w6, x, nb))
        << "q6_K nb=" << nb;
  }
}

// tile_f32: every M × R shape gives each entry bit for bit what the 1 × 1 tile gives (batch invariance), and that
// within the summation bound of the reference dot.
TEST_P(KernelTable, F32TilesAreShapeInvariantAndMatchReference) {
  for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 100, 256, 1000}) {
    const int64_t xs = n + 3;  // an activation row stride that is not the row length
    std::vector<float> w(4 * n), x(4 * xs);
    for (auto& v : w) v = normal();
    for (auto& v : x) v = normal();
    float one[4][4], got[4][4];
    for (int t = 0; t < 4; ++t)
      for (int m = 0; m < 4; ++m) {
        fast().tile_f32(w.data() + m * n, 1, x.data() + t * xs, xs, 1, n, &one[t][m], 1);
        double abs_sum = 0;
        for (int64_t i = 0; i < n; ++i) abs_sum += std::fabs(double(w[m * n + i]) * x[t * xs + i]);
        EXPECT_LE(std::fabs(double(one[t][m]) - ref().dot_f32(w.data() + m * n, x.data() + t * xs, n)),
                  gamma(n) * abs_sum);
      }
    for (int64_t M = 1; M <= 4; ++M)
      for (int64_t R = 1; R <= 4; ++R) {
        fast().tile_f32(w.data(), M, x.data(), xs, R, n, &got[0][0], 4);
        for (int64_t t = 0; t < R; ++t)
          for (int64_t m = 0; m < M; ++m) EXPECT_EQ(got[t][m], one[t][m]) << "n=" << n << " M=" << M << " R=" << R;
      }
  }
}

// dot4_* must return exactly what four dot_* calls return: the tiled matmul's batch invariance rests on it.
TEST_P(KernelTable, FourRowDotsEqualSingleRowDotsBitForBit) {
  auto expect_same = [](const float* four, const float* single, const char* what, int64_t n) {
    for (int i = 0; i < 4; ++i) EXPECT_EQ(four[i], single[i]) << what << " row " << i << " n=" << n;
  };
  float four[4], single[4];
  for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 100, 256, 1000}) {
    const int64_t xs = n + 3;  // a row stride that is not the row length
    std::vector<float> w(n), x(4 * xs);
    for (auto& v : w) v = normal();
    for (auto& v : x) v = normal();
    std::vector<uint16_t> wh(n), xh(4 * xs);
    for (int64_t i = 0; i < n; ++i) wh[i] = f32_to_fp16(w[i]);
    for (size_t i = 0; i < xh.size(); ++i) xh[i] = f32_to_fp16(x[i]);
    fast().dot4_f16(wh.data(), xh.data(), xs, n, four);
    for (int i = 0; i < 4; ++i) single[i] = fast().dot_f16(wh.data(), xh.data() + i * xs, n);
    expect_same(four, single, "f16", n);
    fast().dot4_bf16(wh.data(), xh.data(), xs, n, four);  // any bit pattern is a bf16 number
    for (int i = 0; i < 4; ++i) single[i] = fast().dot_bf16(wh.data(), xh.data() + i * xs, n);
    expect_same(four, single, "bf16", n);
  }
  for (int64_t nb : {1, 2, 3, 8, 9}) {
    const int64_t xs = nb + 1;
    std::vector<float> xf(4 * xs * kQK_K);
    for (auto& v : xf) v = normal();
    std::vector<BlockQ8_K> xk(4 * xs);
    fast().quantize_q8_k(xf.data(), xk.data(), 4 * xs * kQK_K);
    const auto k4 = random_k_blocks<BlockQ4_K>(rng, nb);
    const auto k5 = random_k_blocks<BlockQ5_K>(rng, nb);
    const auto k6 = random_k_blocks<BlockQ6_K>(rng, nb);
    fast().dot4_q4_k(k4.data(), xk.data(), xs, nb, four);
    for (int i = 0; i < 4; ++i) single[i] = fast().dot_q4_k(k4.data(), xk.data() + i * xs, nb);
    expect_same(four, single, "q4_K", nb);
    fast().dot4_q5_k(k5.data(), xk.data(), xs, nb, four);
    for (int i = 0; i < 4; ++i) single[i] = fast().dot_q5_k(k5.data(), xk.data() + i * xs, nb);
    expect_same(four, single, "q5_K", nb);
    fast().dot4_q6_k(k6.data(), xk.data(), xs, nb, four);
    for (int i = 0; i < 4; ++i) single[i] = fast().dot_q6_k(k6.data(), xk.data() + i * xs, nb);
    expect_same(four, single, "q6_K", nb);
  }
}

// The memory probe's reader: every way of loading gives the generic table's word sum, for lengths of 1..40 lines
// (the four-line loop and its tail) at every 64-byte offset of a page.
TEST_P(KernelTable, StreamSumsEqualTheReferenceForEveryLoadKind) {
  std::vector<uint64_t> words(4096 / 8 + 64 * 40 / 8 + 64);
  for (uint64_t& w : words) w = (static_cast<uint64_t>(rng()) << 32) ^ rng();
  auto* base = reinterpret_cast<uint8_t*>(words.data());
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  for (int64_t lines = 1; lines <= 40; ++lines)
    for (int64_t off = 0; off < 4096; off += 64 * 13) {
      const uint64_t want = ref().stream_sum(base + off, 64 * lines, StreamLoad::kPlain);
      for (StreamLoad how : {StreamLoad::kPlain, StreamLoad::kNonTemporal, StreamLoad::kPrefetch})
        ASSERT_EQ(fast().stream_sum(base + off, 64 * lines, how), want)
            << "lines " << lines << " offset " << off << " load kind " << static_cast<int>(how);
    }
  uint64_t sum = 0;  // and the reference is the plain sum of the words
  for (int i = 0; i < 8 * 3; ++i) sum += reinterpret_cast<const uint64_t*>(base)[i];
  EXPECT_EQ(ref().stream_sum(base, 64 * 3, StreamLoad::kPlain), sum);
}

INSTANTIATE_TEST_SUITE_P(AllTables, KernelTable, ::testing::ValuesIn(tables()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
