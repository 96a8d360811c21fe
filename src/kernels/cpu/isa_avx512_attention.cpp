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

// Σ_j p[j]·v_j with the output row in registers: column chunks of up to 8 vectors (128 floats), every value row
// of the chunk streamed once. The last vector of a row may be partial (masked).
template <bool kF16>
inline __m512 load_row(const void* v, int64_t i, __mmask16 m) {
  if constexpr (kF16)
    return load_half<true>(static_cast<const uint16_t*>(v) + i, m);
  else
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(v) + i);
}
// Attention scores of one query row: each key row's products summed over d in one vector (an FMA chain), sixteen
// rows at a time reduced lane-wise by a 4-level shuffle tree (15 shuffle pairs and 15 adds for 16 results instead
// of 16 full reductions). The rows go in in the order the tree leaves them (kTreeOrder is its own inverse), so
// the 16 sums come out in position order; a tail of fewer than 16 rows is reduced row by row.
template <bool kF16>
inline __m512 row_products(const float* q, const void* k, int64_t d) {
  __m512 a = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load_row<kF16>(k, i, 0xFFFF), a);
  if (i < d) {
    const __mmask16 m = tail_mask(d - i);
    a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load_row<kF16>(k, i, m), a);
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
template <bool kF16, typename KV>
void scores(const float* q, const KV* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  static constexpr int kTreeOrder[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  const __m512 sv = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 a[16];
    for (int r = 0; r < 16; ++r) a[r] = row_products<kF16>(q, k + off[j + kTreeOrder[r]], d);
    _mm512_storeu_ps(out + j, _mm512_mul_ps(sum_lanes_16(a), sv));
  }
  for (; j < n; ++j) out[j] = _mm512_reduce_add_ps(row_products<kF16>(q, k + off[j], d)) * scale;
}
void scores_f32(const float* q, const float* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  scores<false>(q, k, off, n, d, scale, out);
}
void scores_f16(const float* q, const uint16_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  scores<true>(q, k, off, n, d, scale, out);
}

template <bool kF16, int NC>
void wsum_chunk(const float* p, const void* v, const int64_t* off, int64_t n, int64_t c0, int64_t d, float* out) {
  __m512 acc[NC];
  __mmask16 m[NC];
  for (int c = 0; c < NC; ++c) {
    acc[c] = _mm512_setzero_ps();
    const int64_t left = d - c0 - 16 * c;
    m[c] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(left);
  }
  for (int64_t j = 0; j < n; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_fmadd_ps(pj, load_row<kF16>(v, off[j] + c0 + 16 * c, m[c]), acc[c]);
  }
  for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(out + c0 + 16 * c, m[c], acc[c]);
}
template <bool kF16>
void wsum(const float* p, const void* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  for (int64_t c0 = 0; c0 < d; c0 += 128) {
    switch ((std::min<int64_t>(d - c0, 128) + 15) / 16) {
      case 1: wsum_chunk<kF16, 1>(p, v, off, n, c0, d, out); break;
      case 2: wsum_chunk<kF16, 2>(p, v, off, n, c0, d, out); break;
      case 3: wsum_chunk<kF16, 3>(p, v, off, n, c0, d, out); break;
      case 4: wsum_chunk<kF16, 4>(p, v, off, n, c0, d, out); break;
      case 5: wsum_chunk<kF16, 5>(p, v, off, n, c0, d, out); break;
      case 6: wsum_chunk<kF16, 6>(p, v, off, n, c0, d, out); break;
      case 7: wsum_chunk<kF16, 7>(p, v, off, n, c0, d, out); break;
      default: wsum_chunk<kF16, 8>(p, v, off, n, c0, d, out); break;
    }
  }
}
void wsum_f32(const float* p, const float* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum<false>(p, v, off, n, d, out);
}
void wsum_f16(const float* p, const uint16_t* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum<true>(p, v, off, n, d, out);
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
