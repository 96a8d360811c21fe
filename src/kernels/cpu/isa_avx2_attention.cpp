// AVX2 attention over the paged KV cache (f32, f16, Q8_0, FP8 E4M3 rows) for the table in isa_avx2.cpp: the
// multi-query kernels load and convert each K/V row once for a tile of queries (every row × head of a KV group)
// instead of once per query. Scores put 16 keys in the lanes of two vectors, transposed once into kt[d][16], and
// broadcast each query element over them; value sums keep up to 4 queries × 2 vectors of output columns in
// registers while the value rows stream past. 16 ymm registers bound both shapes. Both take the next chunk's rows
// from the paged attention (AttentionPrefetch) and prefetch them a row at a time as they go.
#include "kernels/cpu/avx2_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/fp16.h"
#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kv_quant_kernels.h"

namespace kvik::avx2 {
namespace {

// Elements e..e+7 of a cache as floats. F32 as stored; F16 widened (F16C); Q8_0 with e a multiple of 8, so the 8
// lie in one block: int8 → float times the block's scale (exact, as the reference's dequantization); FP8 E4M3 as
// below.
inline __m256 load8(const float* c, int64_t e) { return _mm256_loadu_ps(c + e); }
inline __m256 load8(const uint16_t* c, int64_t e) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + e)));
}
inline __m256 load8(const BlockQ8_0* c, int64_t e) {
  const BlockQ8_0& b = c[static_cast<uint64_t>(e) / 32];  // offsets are never negative: shifts, not divisions
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + (e & 31)));
  const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}
// FP8 E4M3 (bias 7) moved bit for bit into fp16 (bias 15): sign to bit 15, exponent and mantissa to bits 7..14, which
// is every finite code's value times 2^-8, subnormals included; widened and times 256 (exact). The code 0x7F (NaN)
// gets the fp16 exponent all ones with a non-zero mantissa, a NaN: fp8_e4m3_to_f32 without a table lookup.
inline __m256 load8(const uint8_t* c, int64_t e) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + e)));
  const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
  __m128i h = _mm_or_si128(_mm_and_si128(_mm_slli_epi16(w, 8), _mm_set1_epi16(static_cast<int16_t>(0x8000))),
                           _mm_slli_epi16(mag, 7));
  h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7E00)));
  return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

// NV vectors of elements e, e+8, ... (the value row's columns of one wsum pass). Q8_0: two vectors in one block share
// its scale and one 16-byte load (the same values as two load8 calls).
template <int NV, typename KV>
inline void load_runs(const KV* c, int64_t e, __m256* x) {
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) x[v] = load8(c, e + 8 * v);
}
template <int NV>
inline void load_runs(const BlockQ8_0* c, int64_t e, __m256* x) {
  int v = 0;
#pragma GCC unroll 4
  for (; v + 2 <= NV; v += 2) {
    const int64_t ev = e + 8 * v;
    if ((ev & 31) == 24) {  // the two runs in two blocks
      x[v] = load8(c, ev), x[v + 1] = load8(c, ev + 8);
      continue;
    }
    const BlockQ8_0& b = c[static_cast<uint64_t>(ev) / 32];
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + (ev & 31)));
    const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
    x[v] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    x[v + 1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(q, q))));
  }
  if (v < NV) x[v] = load8(c, e + 8 * v);
}

// One query's scores, key by key: a dot over d in two FMA chains (elements past the last whole vector scalar).
template <typename KV>
void scores_rows(const float* q, const KV* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const KV* row = k + off[j];
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(row, i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(row, i + 8), a1);
    }
    if (i + 8 <= d) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(row, i), a0), i += 8;
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < d; ++i) {
      if constexpr (std::is_same_v<KV, float>)
        s += q[i] * row[i];
      else
        s += q[i] * fp16_to_f32(row[i]);
    }
    out[j] = s * scale;
  }
}

// 8×8 transpose of the rows r[0..7] in registers (unpack, 64-bit shuffles, 128-bit lane swaps); r[c] becomes
// column c.
inline void transpose8(__m256* r) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x31);
  }
}

constexpr int64_t kMaxTransposedDim = 256;  // kt holds d_h ≤ 256 (16 KiB on the stack)

// Keys j0..j0+nk−1 (nk ≤ 16) transposed into kt[c][16] for c < d: lane l of kt[c] is element c of key j0 + l, lanes
// past nk zero.
template <typename KV>
void transpose_keys(const KV* k, const int64_t* off, int64_t nk, int64_t d, float* kt) {
  for (int64_t c0 = 0; c0 < d; c0 += 8)
    for (int h = 0; h < 2; ++h) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = 8 * h + j < nk ? load8(k, off[8 * h + j] + c0) : _mm256_setzero_ps();
      transpose8(r);
      for (int c = 0; c < 8; ++c) _mm256_store_ps(kt + (c0 + c) * 16 + 8 * h, r[c]);
    }
}

// The first nk of the 16 scores in a0 (keys 0..7) and a1 (keys 8..15), times the scale, stored at out.
inline void store_scores(__m256 a0, __m256 a1, __m256 sv, int64_t nk, float* out) {
  a0 = _mm256_mul_ps(a0, sv), a1 = _mm256_mul_ps(a1, sv);
  if (nk == 16) {
    _mm256_storeu_ps(out, a0), _mm256_storeu_ps(out + 8, a1);
    return;
  }
  alignas(32) float s[16];
  _mm256_store_ps(s, a0), _mm256_store_ps(s + 8, a1);
  std::copy_n(s, nk, out);
}

// Scores of nq queries over 16-key blocks: every query's score vectors are Σ_c q[c]·kt[c] as one FMA chain per key
// vector, four queries at a time (8 accumulators, 2 key vectors, a broadcast: 11 of the 16 registers) and the rest
// one at a time with the same chain. A key's score is the same instructions in its lane whatever the block, the
// query count or the key's position in the call.
template <typename KV>
void scores_multi(const float* q, int64_t q_stride, int64_t nq, const KV* k, const int64_t* off, int64_t n, int64_t d,
                  float scale, float* out, int64_t out_stride) {
  alignas(32) float kt[kMaxTransposedDim * 16];
  const __m256 sv = _mm256_set1_ps(scale);
  const AttentionPrefetch pf = take_attention_prefetch();
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t nk = std::min<int64_t>(16, n - j0);
    transpose_keys(k, off + j0, nk, d, kt);
    // The block's share of the rows to prefetch, pf.off[j0 .. j0 + 15]: one at the start of each `every` elements
    // of the first query pass (d / 16 of them; all at once where d < 16).
    int64_t pr = j0;
    const int64_t pend = std::min(pf.n, j0 + 16), every = std::max<int64_t>(1, d / 16);
    if (d < 16)
      for (; pr < pend; ++pr) prefetch_kv_row<KV>(pf.cache, pf.off[pr], d);
    int64_t i = 0;
    for (; i + 4 <= nq; i += 4) {
      const float* q0 = q + i * q_stride;
      __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
      for (int64_t c0 = 0; c0 < d; c0 += every) {
        if (pr < pend) prefetch_kv_row<KV>(pf.cache, pf.off[pr++], d);
        for (int64_t c = c0, ce = std::min(d, c0 + every); c < ce; ++c) {
          const __m256 k0 = _mm256_load_ps(kt + c * 16), k1 = _mm256_load_ps(kt + c * 16 + 8);
          __m256 x = _mm256_broadcast_ss(q0 + c);
          a00 = _mm256_fmadd_ps(x, k0, a00), a01 = _mm256_fmadd_ps(x, k1, a01);
          x = _mm256_broadcast_ss(q0 + q_stride + c);
          a10 = _mm256_fmadd_ps(x, k0, a10), a11 = _mm256_fmadd_ps(x, k1, a11);
          x = _mm256_broadcast_ss(q0 + 2 * q_stride + c);
          a20 = _mm256_fmadd_ps(x, k0, a20), a21 = _mm256_fmadd_ps(x, k1, a21);
          x = _mm256_broadcast_ss(q0 + 3 * q_stride + c);
          a30 = _mm256_fmadd_ps(x, k0, a30), a31 = _mm256_fmadd_ps(x, k1, a31);
        }
      }
      store_scores(a00, a01, sv, nk, out + i * out_stride + j0);
      store_scores(a10, a11, sv, nk, out + (i + 1) * out_stride + j0);
      store_scores(a20, a21, sv, nk, out + (i + 2) * out_stride + j0);
      store_scores(a30, a31, sv, nk, out + (i + 3) * out_stride + j0);
    }
    for (; i < nq; ++i) {
      const float* qi = q + i * q_stride;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0;
      for (int64_t c0 = 0; c0 < d; c0 += every) {
        if (pr < pend) prefetch_kv_row<KV>(pf.cache, pf.off[pr++], d);
        for (int64_t c = c0, ce = std::min(d, c0 + every); c < ce; ++c) {
          const __m256 x = _mm256_broadcast_ss(qi + c);
          a0 = _mm256_fmadd_ps(x, _mm256_load_ps(kt + c * 16), a0);
          a1 = _mm256_fmadd_ps(x, _mm256_load_ps(kt + c * 16 + 8), a1);
        }
      }
      store_scores(a0, a1, sv, nk, out + i * out_stride + j0);
    }
  }
}

// Value sums of NQ queries over NV·8 output columns from c0: each value row's NV vectors loaded (and converted)
// once for all NQ queries; per query and column the same FMA chain over j whatever NQ, NV or c0, so the shapes
// below may be mixed freely without changing a bit of any query's sum.
template <typename KV, int NQ, int NV>
void wsum_block(const float* p, int64_t p_stride, const KV* v, const int64_t* off, int64_t n, int64_t c0, float* out,
                int64_t out_stride, const AttentionPrefetch& pf = AttentionPrefetch{}, int64_t d = 0, int64_t pass = 0,
                int64_t passes = 1) {
  int64_t pr = pass;  // this pass's rows to prefetch: pass, pass + passes, ..., one every `passes` keys
  // The loops fully unrolled early (GCC otherwise stores the accumulator array to memory every iteration).
  __m256 a[NQ][NV];
#pragma GCC unroll 8
  for (int u = 0; u < NQ; ++u)
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) a[u][c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    if (j == pr - pass && pr < pf.n) prefetch_kv_row<KV>(pf.cache, pf.off[pr], d), pr += passes;
    __m256 x[NV];
    load_runs<NV>(v, off[j] + c0, x);
#pragma GCC unroll 8
    for (int u = 0; u < NQ; ++u) {
      const __m256 pj = _mm256_broadcast_ss(p + u * p_stride + j);
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) a[u][c] = _mm256_fmadd_ps(pj, x[c], a[u][c]);
    }
  }
#pragma GCC unroll 8
  for (int u = 0; u < NQ; ++u)
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(out + u * out_stride + c0 + 8 * c, a[u][c]);
}
template <typename KV, int NQ, int NV>
void wsum_queries(const float* p, int64_t p_stride, const KV* v, const int64_t* off, int64_t n, int64_t d, float* out,
                  int64_t out_stride, const AttentionPrefetch& pf) {
  int64_t c0 = 0;
  const int64_t passes = d / (8 * NV);
  for (; c0 + 8 * NV <= d; c0 += 8 * NV)
    wsum_block<KV, NQ, NV>(p, p_stride, v, off, n, c0, out, out_stride, pf, d, c0 / (8 * NV), passes);
  for (; c0 < d; c0 += 8) wsum_block<KV, NQ, 1>(p, p_stride, v, off, n, c0, out, out_stride);
}
// d % 8 == 0. Four queries × 2 vectors (8 accumulators, 2 value vectors, a broadcast), then two × 4 and one × 8: the
// same 8 accumulators with more columns each.
template <typename KV>
void wsum_multi(const float* p, int64_t p_stride, int64_t nq, const KV* v, const int64_t* off, int64_t n, int64_t d,
                float* out, int64_t out_stride) {
  const AttentionPrefetch pf = take_attention_prefetch();
  int64_t i = 0;
  for (; i + 4 <= nq; i += 4)
    wsum_queries<KV, 4, 2>(p + i * p_stride, p_stride, v, off, n, d, out + i * out_stride, out_stride,
                           i == 0 ? pf : AttentionPrefetch{});
  if (i + 2 <= nq) {
    wsum_queries<KV, 2, 4>(p + i * p_stride, p_stride, v, off, n, d, out + i * out_stride, out_stride,
                           i == 0 ? pf : AttentionPrefetch{});
    i += 2;
  }
  if (i < nq)
    wsum_queries<KV, 1, 8>(p + i * p_stride, p_stride, v, off, n, d, out + i * out_stride, out_stride,
                           i == 0 ? pf : AttentionPrefetch{});
}

// Whole vectors on the transposed path: d a multiple of 8 that kt holds.
bool transposable(int64_t d) { return d % 8 == 0 && d <= kMaxTransposedDim; }
// Q8_0 loads need each 8-element run inside one block: rows at multiples of 8 (stories260K's d_h 8, where one block
// holds 4 heads, included) and d % 8 == 0.
bool runs_in_blocks(const int64_t* off, int64_t n, int64_t d) {
  if (d % 8 != 0) return false;
  for (int64_t j = 0; j < n; ++j)
    if (off[j] % 8 != 0) return false;
  return true;
}

// e^x = 2^k·e^r with k = round(x·log2 e) and r = x − k·ln 2 (two-part ln 2, |r| ≤ ½ ln 2), e^r by its degree-6
// Taylor polynomial (truncation < 1.3e-7 relative, as the AVX-512 table's), 2^k built in the exponent bits. AVX2
// has no vscalefps, so x is clamped where 2^k stays normal (k ≥ −126) and lanes below it (e^x < 1.2e-38) read 0.
inline __m256 exp_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);  // ln 2^-126
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 e = _mm256_set1_ps(1.0f / 720.0f);
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 120.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 24.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 6.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(0.5f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(e, _mm256_castsi256_ps(bits)));
}
// Lanes 0..m−1 of a vector (m ≤ 8) as an all-ones mask for maskload / maskstore.
inline __m256i first_lanes(int64_t m) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(m)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline void add_to(__m256d* sum, __m256 e) {  // the sum in doubles, as the reference's
  sum[0] = _mm256_add_pd(sum[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  sum[1] = _mm256_add_pd(sum[1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

}  // namespace

void scores_f32(const float* q, const float* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  scores_rows(q, k, off, n, d, scale, out);
}
void scores_f16(const float* q, const uint16_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  scores_rows(q, k, off, n, d, scale, out);
}
void wsum_f32(const float* p, const float* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum_multi_f32(p, n, 1, v, off, n, d, out, d);
}
void wsum_f16(const float* p, const uint16_t* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum_multi_f16(p, n, 1, v, off, n, d, out, d);
}

void scores_multi_f32(const float* q, int64_t q_stride, int64_t nq, const float* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride) {
  if (transposable(d)) {
    scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  } else {
    burst_attention_prefetch<float>(d);
    scores_multi_by_rows<float, scores_f32>(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  }
}
void scores_multi_f16(const float* q, int64_t q_stride, int64_t nq, const uint16_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride) {
  if (transposable(d)) {
    scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  } else {
    burst_attention_prefetch<uint16_t>(d);
    scores_multi_by_rows<uint16_t, scores_f16>(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  }
}
void scores_multi_q8_0(const float* q, int64_t q_stride, int64_t nq, const BlockQ8_0* k, const int64_t* off, int64_t n,
                       int64_t d, float scale, float* out, int64_t out_stride) {
  if (transposable(d) && runs_in_blocks(off, n, d)) {
    scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  } else {
    burst_attention_prefetch<BlockQ8_0>(d);
    scores_multi_by_rows<BlockQ8_0, scores_q8_0>(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  }
}
void scores_multi_fp8(const float* q, int64_t q_stride, int64_t nq, const uint8_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride) {
  if (transposable(d)) {
    scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  } else {
    burst_attention_prefetch<uint8_t>(d);
    scores_multi_by_rows<uint8_t, scores_fp8>(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  }
}

void wsum_multi_f32(const float* p, int64_t p_stride, int64_t nq, const float* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride) {
  if (d % 8 == 0) {
    wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
  } else {
    burst_attention_prefetch<float>(d);
    generic_kernels().wsum_multi_f32(p, p_stride, nq, v, off, n, d, out, out_stride);
  }
}
void wsum_multi_f16(const float* p, int64_t p_stride, int64_t nq, const uint16_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride) {
  if (d % 8 == 0) {
    wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
  } else {
    burst_attention_prefetch<uint16_t>(d);
    generic_kernels().wsum_multi_f16(p, p_stride, nq, v, off, n, d, out, out_stride);
  }
}
void wsum_multi_q8_0(const float* p, int64_t p_stride, int64_t nq, const BlockQ8_0* v, const int64_t* off, int64_t n,
                     int64_t d, float* out, int64_t out_stride) {
  if (runs_in_blocks(off, n, d)) {
    wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
  } else {
    burst_attention_prefetch<BlockQ8_0>(d);
    wsum_multi_by_rows<BlockQ8_0, wsum_q8_0>(p, p_stride, nq, v, off, n, d, out, out_stride);
  }
}
void wsum_multi_fp8(const float* p, int64_t p_stride, int64_t nq, const uint8_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride) {
  if (d % 8 == 0) {
    wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
  } else {
    burst_attention_prefetch<uint8_t>(d);
    wsum_multi_by_rows<uint8_t, wsum_fp8>(p, p_stride, nq, v, off, n, d, out, out_stride);
  }
}

// softmax: the max, then e^(x − max) by exp_ps summed in doubles, then times 1 / sum; the last partial vector through
// masked loads and stores.
void softmax(float* x, int64_t n) {
  const int64_t whole = n / 8 * 8;
  const __m256i tail = first_lanes(n - whole);
  __m256 mv = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < whole; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  if (whole < n)
    mv = _mm256_max_ps(mv, _mm256_blendv_ps(mv, _mm256_maskload_ps(x + whole, tail), _mm256_castsi256_ps(tail)));
  const __m256 mx = _mm256_set1_ps(hmax(mv));
  __m256d sum[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx));
    _mm256_storeu_ps(x + i, e);
    add_to(sum, e);
  }
  if (whole < n) {
    const __m256 e =
        _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + whole, tail), mx)), _mm256_castsi256_ps(tail));
    _mm256_maskstore_ps(x + whole, tail, e);
    add_to(sum, e);
  }
  const __m256d s = _mm256_add_pd(sum[0], sum[1]);
  __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  s2 = _mm_add_sd(s2, _mm_unpackhi_pd(s2, s2));
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / _mm_cvtsd_f64(s2)));
  for (int64_t i = 0; i < whole; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  if (whole < n) _mm256_maskstore_ps(x + whole, tail, _mm256_mul_ps(_mm256_maskload_ps(x + whole, tail), inv));
}

// gate = silu(gate)·up = gate / (1 + e^−gate)·up with exp_ps; e^−gate is taken at most at e^88 (finite), where the
// reference's e^−gate is infinite and its result −0: the quotient is then below 1e-36 in magnitude instead.
void silu_mul(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), hi = _mm256_set1_ps(88.0f);
  const auto silu = [&](__m256 g, __m256 u) {
    const __m256 e = exp_ps(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), g), hi));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
  };
  const int64_t whole = n / 8 * 8;
  for (int64_t i = 0; i < whole; i += 8)
    _mm256_storeu_ps(gate + i, silu(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (whole < n) {
    const __m256i tail = first_lanes(n - whole);
    _mm256_maskstore_ps(gate + whole, tail,
                        silu(_mm256_maskload_ps(gate + whole, tail), _mm256_maskload_ps(up + whole, tail)));
  }
}

}  // namespace kvik::avx2
