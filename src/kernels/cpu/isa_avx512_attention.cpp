// AVX-512 attention (scores over a query row's keys, value sums), softmax and silu·mul, for the table in
// isa_avx512.cpp.
// GCC 12's AVX-512 headers build casts and reductions from _mm512_undefined_*(), which -Wall reports as
// uninitialised (a known false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/isa_avx512_common.h"
#include "kernels/cpu/kv_quant_kernels.h"

namespace kvik::avx512 {

float dot_f32_f16(const float* x, const uint16_t* h, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load_half<true>(h + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), load_half<true>(h + i + 16), a1);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load_half<true>(h + i), a0);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), load_half<true>(h + i, m), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// A cache row of each element type, read 16 values at a time as floats: the row at element offset o, and its
// elements i..i+15 (lanes outside m read as 0). F32 as stored; F16 widened; Q8_0 rows start on a block (the
// multi-query kernels check it) and 16 elements lie in one block: int8 → float times the block's scale (exact, as
// the reference's dequantization); FP8 E4M3 as below.
inline const float* row_at(const float* c, int64_t o) { return c + o; }
inline const uint16_t* row_at(const uint16_t* c, int64_t o) { return c + o; }
inline const BlockQ8_0* row_at(const BlockQ8_0* c, int64_t o) { return c + o / 32; }
inline const uint8_t* row_at(const uint8_t* c, int64_t o) { return c + o; }
inline __m512 load16(const float* r, int64_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, r + i); }
inline __m512 load16(const uint16_t* r, int64_t i, __mmask16 m) { return load_half<true>(r + i, m); }
inline __m512 load16(const BlockQ8_0* r, int64_t i, __mmask16 m) {
  const BlockQ8_0& b = r[i / 32];
  const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, b.qs + i % 32)));
  return _mm512_mul_ps(_mm512_set1_ps(f16(b.d)), q);
}
// FP8 E4M3 (bias 7) moved bit for bit into fp16 (bias 15): sign to bit 15, exponent and mantissa to bits 7..14, which
// is every finite code's value times 2^-8, subnormals included; widened and times 256 (exact), the code 0x7F
// (NaN) as NaN: fp8_e4m3_to_f32 without a table lookup.
inline __m512 load16(const uint8_t* r, int64_t i, __mmask16 m) {
  const __m256i w = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, r + i));
  const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
  const __m256i h =
      _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8), _mm256_slli_epi16(mag, 7));
  const __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
  return _mm512_mask_mov_ps(v, _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F)), _mm512_set1_ps(NAN));
}

// Attention scores of one query row: each key row's products summed over d in one vector (an FMA chain), sixteen
// rows at a time reduced lane-wise by a 4-level shuffle tree (15 shuffle pairs and 15 adds for 16 results instead
// of 16 full reductions). The rows go in in the order the tree leaves them (kTreeOrder is its own inverse), so
// the 16 sums come out in position order; a tail of fewer than 16 rows is reduced row by row.
template <typename KV>
inline __m512 row_products(const float* q, const KV* row, int64_t d) {
  __m512 a = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(row, i, 0xFFFF), a);
  if (i < d) {
    const __mmask16 m = tail_mask(d - i);
    a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load16(row, i, m), a);
  }
  return a;
}
inline __m512 sum_lanes_16(__m512* a) {  // lane i of the result = Σ lanes of a[kTreeOrder[i]]
  for (int j = 0; j < 8; ++j)
    a[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[j], a[j + 8], 0x44), _mm512_shuffle_f32x4(a[j], a[j + 8], 0xEE));
  for (int j = 0; j < 4; ++j)
    a[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[j], a[j + 4], 0x88), _mm512_shuffle_f32x4(a[j], a[j + 4], 0xDD));
  for (int j = 0; j < 2; ++j)
    a[j] = _mm512_add_ps(_mm512_shuffle_ps(a[j], a[j + 2], 0x44), _mm512_shuffle_ps(a[j], a[j + 2], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(a[0], a[1], 0x88), _mm512_shuffle_ps(a[0], a[1], 0xDD));
}
template <typename KV>
void scores(const float* q, const KV* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  static constexpr int kTreeOrder[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  const __m512 sv = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 a[16];
    for (int r = 0; r < 16; ++r) a[r] = row_products(q, row_at(k, off[j + kTreeOrder[r]]), d);
    _mm512_storeu_ps(out + j, _mm512_mul_ps(sum_lanes_16(a), sv));
  }
  for (; j < n; ++j) out[j] = _mm512_reduce_add_ps(row_products(q, row_at(k, off[j]), d)) * scale;
}
void scores_f32(const float* q, const float* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  scores(q, k, off, n, d, scale, out);
}
void scores_f16(const float* q, const uint16_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  scores(q, k, off, n, d, scale, out);
}

// 16×16 transpose of the rows r[0..15] in registers (unpack, then 128-bit lane shuffles); r[c] becomes column c.
inline void transpose16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
  }
}

// Scores of nq queries over keys in the lanes: each block of 16 keys is transposed once into kt[d][16] (f32), then
// every query's score vector is Σ_c q[c]·kt[c] with two partial sums (even and odd c) added at the end. A key's
// score is the same instructions in its lane whatever the block, the query count or the position in the call.
template <typename KV>
void scores_multi(const float* q, int64_t q_stride, int64_t nq, const KV* k, const int64_t* off, int64_t n, int64_t d,
                  float scale, float* out, int64_t out_stride) {
  if (d % 16 != 0 || d > 256) {  // no whole vectors to transpose (or more than kt holds): one query at a time
    burst_attention_prefetch<KV>(d);
    for (int64_t i = 0; i < nq; ++i) scores(q + i * q_stride, k, off, n, d, scale, out + i * out_stride);
    return;
  }
  alignas(64) float kt[256 * 16];
  const __m512 sv = _mm512_set1_ps(scale);
  const AttentionPrefetch pf = take_attention_prefetch();
  // The first query pass of a block prefetches the block's share of the next chunk's rows (pf.off[j0 .. j0 + 15]),
  // one at the start of each `every` columns (an even count: the loops go two columns a step); what is left after
  // it (d < 32) goes at once.
  const int64_t every = std::max<int64_t>(2, d / 16 & ~int64_t{1});
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t nk = std::min<int64_t>(16, n - j0);
    for (int64_t c0 = 0; c0 < d; c0 += 16) {  // columns c0..c0+15 of the block's rows, transposed
      __m512 r[16];
      for (int64_t j = 0; j < 16; ++j) r[j] = j < nk ? load16(row_at(k, off[j0 + j]), c0, 0xFFFF) : _mm512_setzero_ps();
      transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_store_ps(kt + (c0 + c) * 16, r[c]);
    }
    const __mmask16 m = nk == 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(nk);
    int64_t pr = j0;
    const int64_t pend = std::min(pf.n, j0 + 16);
    int64_t i = 0;
    for (; i + 4 <= nq; i += 4) {  // four queries at a time: 8 accumulators in flight
      const float* q0 = q + i * q_stride;
      __m512 a[4][2];
      for (auto& x : a) x[0] = x[1] = _mm512_setzero_ps();
      for (int64_t c0 = 0; c0 < d; c0 += every) {
        if (pr < pend) prefetch_kv_row<KV>(pf.cache, pf.off[pr++], d);
        for (int64_t c = c0, ce = std::min(d, c0 + every); c < ce; c += 2) {
          const __m512 k0 = _mm512_load_ps(kt + c * 16), k1 = _mm512_load_ps(kt + (c + 1) * 16);
          for (int u = 0; u < 4; ++u) {
            a[u][0] = _mm512_fmadd_ps(_mm512_set1_ps(q0[u * q_stride + c]), k0, a[u][0]);
            a[u][1] = _mm512_fmadd_ps(_mm512_set1_ps(q0[u * q_stride + c + 1]), k1, a[u][1]);
          }
        }
      }
      for (; pr < pend; ++pr) prefetch_kv_row<KV>(pf.cache, pf.off[pr], d);
      for (int u = 0; u < 4; ++u)
        _mm512_mask_storeu_ps(out + (i + u) * out_stride + j0, m, _mm512_mul_ps(_mm512_add_ps(a[u][0], a[u][1]), sv));
    }
    for (; i < nq; ++i) {  // the same instructions, one query at a time
      const float* qi = q + i * q_stride;
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
      for (int64_t c0 = 0; c0 < d; c0 += every) {
        if (pr < pend) prefetch_kv_row<KV>(pf.cache, pf.off[pr++], d);
        for (int64_t c = c0, ce = std::min(d, c0 + every); c < ce; c += 2) {
          a0 = _mm512_fmadd_ps(_mm512_set1_ps(qi[c]), _mm512_load_ps(kt + c * 16), a0);
          a1 = _mm512_fmadd_ps(_mm512_set1_ps(qi[c + 1]), _mm512_load_ps(kt + (c + 1) * 16), a1);
        }
      }
      for (; pr < pend; ++pr) prefetch_kv_row<KV>(pf.cache, pf.off[pr], d);
      _mm512_mask_storeu_ps(out + i * out_stride + j0, m, _mm512_mul_ps(_mm512_add_ps(a0, a1), sv));
    }
  }
}
// Value sums of up to 4 queries at once over 64 columns (4 vectors) of the value rows: each row loaded (and
// converted) once for all of them; per query and lane the same FMA chain over j as wsum_chunk's.
// A call given the hand-over pf prefetches rows pass, pass + passes, ... of it, one every `passes` keys, so the
// column blocks' first calls (pass 0 .. passes − 1) cover it between them.
template <typename KV, int NQ>
void wsum_multi_cols(const float* p, int64_t p_stride, const KV* v, const int64_t* off, int64_t n, int64_t c0,
                     float* out, int64_t out_stride, const AttentionPrefetch& pf = AttentionPrefetch{}, int64_t d = 0,
                     int64_t pass = 0, int64_t passes = 1) {
  // Named accumulators: GCC keeps an array of vectors in memory here, storing it every iteration.
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
  int64_t pr = pass;
  for (int64_t j = 0; j < n; ++j) {
    if (j == pr - pass && pr < pf.n) prefetch_kv_row<KV>(pf.cache, pf.off[pr], d), pr += passes;
    const KV* row = row_at(v, off[j]);
    const __m512 v0 = load16(row, c0, 0xFFFF), v1 = load16(row, c0 + 16, 0xFFFF);
    const __m512 v2 = load16(row, c0 + 32, 0xFFFF), v3 = load16(row, c0 + 48, 0xFFFF);
    __m512 pj = _mm512_set1_ps(p[j]);
    a00 = _mm512_fmadd_ps(pj, v0, a00), a01 = _mm512_fmadd_ps(pj, v1, a01);
    a02 = _mm512_fmadd_ps(pj, v2, a02), a03 = _mm512_fmadd_ps(pj, v3, a03);
    if constexpr (NQ == 4) {
      pj = _mm512_set1_ps(p[p_stride + j]);
      a10 = _mm512_fmadd_ps(pj, v0, a10), a11 = _mm512_fmadd_ps(pj, v1, a11);
      a12 = _mm512_fmadd_ps(pj, v2, a12), a13 = _mm512_fmadd_ps(pj, v3, a13);
      pj = _mm512_set1_ps(p[2 * p_stride + j]);
      a20 = _mm512_fmadd_ps(pj, v0, a20), a21 = _mm512_fmadd_ps(pj, v1, a21);
      a22 = _mm512_fmadd_ps(pj, v2, a22), a23 = _mm512_fmadd_ps(pj, v3, a23);
      pj = _mm512_set1_ps(p[3 * p_stride + j]);
      a30 = _mm512_fmadd_ps(pj, v0, a30), a31 = _mm512_fmadd_ps(pj, v1, a31);
      a32 = _mm512_fmadd_ps(pj, v2, a32), a33 = _mm512_fmadd_ps(pj, v3, a33);
    }
  }
  const __m512 all[4][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}, {a30, a31, a32, a33}};
  for (int u = 0; u < NQ; ++u)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + u * out_stride + c0 + 16 * c, all[u][c]);
}
template <typename KV>
void wsum(const float* p, const KV* v, const int64_t* off, int64_t n, int64_t d, float* out);  // below
template <typename KV>
void wsum_multi(const float* p, int64_t p_stride, int64_t nq, const KV* v, const int64_t* off, int64_t n, int64_t d,
                float* out, int64_t out_stride) {
  if (d % 64 != 0) {  // the column blocks are 64 wide: one query at a time
    burst_attention_prefetch<KV>(d);
    for (int64_t i = 0; i < nq; ++i) wsum(p + i * p_stride, v, off, n, d, out + i * out_stride);
    return;
  }
  const AttentionPrefetch pf = take_attention_prefetch();
  for (int64_t c0 = 0; c0 < d; c0 += 64) {
    const AttentionPrefetch none{};
    int64_t i = 0;
    for (; i + 4 <= nq; i += 4)
      wsum_multi_cols<KV, 4>(p + i * p_stride, p_stride, v, off, n, c0, out + i * out_stride, out_stride,
                             i == 0 ? pf : none, d, c0 / 64, d / 64);
    for (; i < nq; ++i)
      wsum_multi_cols<KV, 1>(p + i * p_stride, p_stride, v, off, n, c0, out + i * out_stride, out_stride,
                             i == 0 ? pf : none, d, c0 / 64, d / 64);
  }
}
void wsum_multi_f32(const float* p, int64_t p_stride, int64_t nq, const float* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride) {
  wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
}
void wsum_multi_f16(const float* p, int64_t p_stride, int64_t nq, const uint16_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride) {
  wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
}
void scores_multi_f32(const float* q, int64_t q_stride, int64_t nq, const float* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride) {
  scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
}
void scores_multi_f16(const float* q, int64_t q_stride, int64_t nq, const uint16_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride) {
  scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
}

// Q8_0 caches: the AVX-512 loaders need whole 16-element runs inside one block, so rows on block boundaries and
// d_h a multiple of 32 (d_h 64 and 128 models); other rows (stories260K's d_h 8, where a block spans 4 heads) take
// the AVX2 kernels one query at a time.
static bool block_rows(const int64_t* off, int64_t n, int64_t d) {
  if (d % 32 != 0) return false;
  for (int64_t j = 0; j < n; ++j)
    if (off[j] % 32 != 0) return false;
  return true;
}
void scores_multi_q8_0(const float* q, int64_t q_stride, int64_t nq, const BlockQ8_0* k, const int64_t* off, int64_t n,
                       int64_t d, float scale, float* out, int64_t out_stride) {
  if (block_rows(off, n, d)) {
    scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  } else {
    burst_attention_prefetch<BlockQ8_0>(d);
    scores_multi_by_rows<BlockQ8_0, avx2::scores_q8_0>(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
  }
}
void wsum_multi_q8_0(const float* p, int64_t p_stride, int64_t nq, const BlockQ8_0* v, const int64_t* off, int64_t n,
                     int64_t d, float* out, int64_t out_stride) {
  if (block_rows(off, n, d)) {
    wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
  } else {
    burst_attention_prefetch<BlockQ8_0>(d);
    wsum_multi_by_rows<BlockQ8_0, avx2::wsum_q8_0>(p, p_stride, nq, v, off, n, d, out, out_stride);
  }
}
void scores_multi_fp8(const float* q, int64_t q_stride, int64_t nq, const uint8_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride) {
  scores_multi(q, q_stride, nq, k, off, n, d, scale, out, out_stride);
}
void wsum_multi_fp8(const float* p, int64_t p_stride, int64_t nq, const uint8_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride) {
  wsum_multi(p, p_stride, nq, v, off, n, d, out, out_stride);
}

template <typename KV, int NC>
void wsum_chunk(const float* p, const KV* v, const int64_t* off, int64_t n, int64_t c0, int64_t d, float* out) {
  __m512 acc[NC];
  __mmask16 m[NC];
  for (int c = 0; c < NC; ++c) {
    acc[c] = _mm512_setzero_ps();
    const int64_t left = d - c0 - 16 * c;
    m[c] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(left);
  }
  for (int64_t j = 0; j < n; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    const KV* row = row_at(v, off[j]);
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_fmadd_ps(pj, load16(row, c0 + 16 * c, m[c]), acc[c]);
  }
  for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(out + c0 + 16 * c, m[c], acc[c]);
}
template <typename KV>
void wsum(const float* p, const KV* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  for (int64_t c0 = 0; c0 < d; c0 += 128) {
    switch ((std::min<int64_t>(d - c0, 128) + 15) / 16) {
      case 1: wsum_chunk<KV, 1>(p, v, off, n, c0, d, out); break;
      case 2: wsum_chunk<KV, 2>(p, v, off, n, c0, d, out); break;
      case 3: wsum_chunk<KV, 3>(p, v, off, n, c0, d, out); break;
      case 4: wsum_chunk<KV, 4>(p, v, off, n, c0, d, out); break;
      case 5: wsum_chunk<KV, 5>(p, v, off, n, c0, d, out); break;
      case 6: wsum_chunk<KV, 6>(p, v, off, n, c0, d, out); break;
      case 7: wsum_chunk<KV, 7>(p, v, off, n, c0, d, out); break;
      default: wsum_chunk<KV, 8>(p, v, off, n, c0, d, out); break;
    }
  }
}
void wsum_f32(const float* p, const float* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum(p, v, off, n, d, out);
}
void wsum_f16(const float* p, const uint16_t* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum(p, v, off, n, d, out);
}

// e^x = 2^k·e^r with k = round(x·log2 e) and r = x − k·ln 2 (two-part ln 2, |r| ≤ ½ ln 2), e^r by its degree-6
// Taylor polynomial (truncation < 1.3e-7 relative), 2^k applied by vscalefps (which also underflows to 0 cleanly).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 e = _mm512_set1_ps(1.0f / 720.0f);
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 120.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 24.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 6.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0.5f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, k);
}

void softmax(float* x, int64_t n) {
  __m512 mv = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
  if (i < n) mv = _mm512_mask_max_ps(mv, tail_mask(n - i), mv, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 sum = _mm512_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx));
    _mm512_storeu_ps(x + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace kvik::avx512
