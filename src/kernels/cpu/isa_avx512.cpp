// AVX-512 (F/BW/VL/DQ) + VNNI kernels, compiled with those flags (CMakeLists.txt) and chosen at run time only on
// CPUs that have all of them (dispatch.cpp). Integer dot products use vpdpbusd (u8 × s8 → s32, four pairs per
// lane): Q4_0's nibbles are already unsigned; for Q8_0 × Q8_0 the sign of w moves onto x (|w| · sign(w)·x).
// The packed-weight kernels are in isa_avx512_packed.cpp, attention / softmax / silu in isa_avx512_attention.cpp,
// the helpers all three share in isa_avx512_common.h.
// GCC 12's AVX-512 headers build casts and reductions from _mm512_undefined_*(), which -Wall reports as
// uninitialised (a known false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/avx2_packed.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa_avx512_common.h"
#include "kernels/cpu/kv_quant_kernels.h"

namespace kvik {
namespace {

using namespace avx512;  // the shared helpers and the packed / attention kernels of the other two files

// The f16/bf16 and K-quant dot products below are templates over R activation rows sharing one pass over the
// weight row: row r of x starts at x + r·xs and gets its own accumulators, updated by exactly the instructions the
// R = 1 instance uses, so dot4_* (R = 4) returns bit for bit what four dot_* (R = 1) calls return. The tiled matmul
// relies on that for batch invariance (as it does on the F32 tile's and gemv_q's shape invariance).

// One f32 row pair (attention's q·k): four accumulators over 64-float steps, a masked tail.
float dot_f32(const float* w, const float* x, int64_t n) {
  __m512 a[4];
  for (int k = 0; k < 4; ++k) a[k] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 4; ++k)
      a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16 * k), _mm512_loadu_ps(x + i + 16 * k), a[k]);
  for (; i + 16 <= n; i += 16) a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a[0]);
  if (i < n) {  // masked tail: the missing lanes load as 0
    const __mmask16 m = tail_mask(n - i);
    a[1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a[1]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

// F32 tile of M weight rows × R activation rows: one accumulator per entry, 16 columns per step (a masked step
// for the tail), so per step M + R loads feed M·R FMAs (4 × 4: 8 loads for 16 FMAs).
template <int M, int R>
void tile_f32_mr(const float* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
  __m512 acc[R][M];
  for (int t = 0; t < R; ++t)
    for (int m = 0; m < M; ++m) acc[t][m] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 wv[M];
    for (int m = 0; m < M; ++m) wv[m] = _mm512_loadu_ps(w + m * n + i);
    for (int t = 0; t < R; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * xs + i);
      for (int m = 0; m < M; ++m) acc[t][m] = _mm512_fmadd_ps(wv[m], xv, acc[t][m]);
    }
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    __m512 wv[M];
    for (int m = 0; m < M; ++m) wv[m] = _mm512_maskz_loadu_ps(k, w + m * n + i);
    for (int t = 0; t < R; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(k, x + t * xs + i);
      for (int m = 0; m < M; ++m) acc[t][m] = _mm512_fmadd_ps(wv[m], xv, acc[t][m]);
    }
  }
  for (int t = 0; t < R; ++t)
    for (int m = 0; m < M; ++m) out[t * os + m] = _mm512_reduce_add_ps(acc[t][m]);
}
template <int M>
void tile_f32_m(const float* w, const float* x, int64_t xs, int64_t R, int64_t n, float* out, int64_t os) {
  switch (R) {
    case 1: return tile_f32_mr<M, 1>(w, x, xs, n, out, os);
    case 2: return tile_f32_mr<M, 2>(w, x, xs, n, out, os);
    case 3: return tile_f32_mr<M, 3>(w, x, xs, n, out, os);
    default: return tile_f32_mr<M, 4>(w, x, xs, n, out, os);
  }
}
void tile_f32(const float* w, int64_t M, const float* x, int64_t xs, int64_t R, int64_t n, float* out, int64_t os) {
  switch (M) {
    case 1: return tile_f32_m<1>(w, x, xs, R, n, out, os);
    case 2: return tile_f32_m<2>(w, x, xs, R, n, out, os);
    case 3: return tile_f32_m<3>(w, x, xs, R, n, out, os);
    default: return tile_f32_m<4>(w, x, xs, R, n, out, os);
  }
}

template <bool kF16, int R>
void rows_half(const uint16_t* w, const uint16_t* x, int64_t xs, int64_t n, float* out) {
  __m512 a[R][2];
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 2; ++k) {
      const __m512 wv = load_half<kF16>(w + i + 16 * k);
      for (int r = 0; r < R; ++r) a[r][k] = _mm512_fmadd_ps(wv, load_half<kF16>(x + r * xs + i + 16 * k), a[r][k]);
    }
  for (; i + 16 <= n; i += 16) {
    const __m512 wv = load_half<kF16>(w + i);
    for (int r = 0; r < R; ++r) a[r][0] = _mm512_fmadd_ps(wv, load_half<kF16>(x + r * xs + i), a[r][0]);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 wv = load_half<kF16>(w + i, m);
    for (int r = 0; r < R; ++r) a[r][1] = _mm512_fmadd_ps(wv, load_half<kF16>(x + r * xs + i, m), a[r][1]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(a[r][0], a[r][1]));
}

// Q8_0 / Q4_0 × ActQ8. Per pair of weight blocks, shared by the R activation rows: the 64 weight bytes as s8 in the
// ActQ8 interleave (32-bit lanes alternate between the two blocks), −128·Σw per lane (to take the +128 of the
// activation bytes off, exactly: every lane sum stays far inside int32), and the two weight scales alternating.
// Per row: one vpdpbusd, a conversion and one FMA with the scales d_w·d_x. Two accumulators per row (even and odd
// pairs) for instruction-level parallelism at R = 1; the odd last block of a row goes through a 256-bit step.
struct WeightPair {
  __m512i q;         // s8, interleaved
  __m512i neg_corr;  // −128·Σ q per lane
  __m512 d;          // d0, d1, d0, d1, ...
};
inline __m512i interleave_blocks(__m256i a, __m256i b) {
  const __m512i idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutex2var_epi32(_mm512_castsi256_si512(a), idx, _mm512_castsi256_si512(b));
}
inline __m512i neg_corr(__m512i q) {
  return _mm512_sub_epi32(_mm512_setzero_si512(),
                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), q));
}
inline __m512 alt_scales(uint16_t a, uint16_t b) {
  return _mm512_cvtph_ps(_mm256_set1_epi32(static_cast<int32_t>(a | (uint32_t{b} << 16))));
}
inline __m512 alt_scales(const float* d) {  // d[0], d[1], d[0], ...
  double pair;
  __builtin_memcpy(&pair, d, sizeof pair);
  return _mm512_castpd_ps(_mm512_set1_pd(pair));
}
inline WeightPair weight_pair(const BlockQ8_0* w) {
  const __m512i q = interleave_blocks(load256(w[0].qs), load256(w[1].qs));
  return {q, neg_corr(q), alt_scales(w[0].d, w[1].d)};
}
// The two blocks' 16-byte nibble arrays side by side, dwords arranged so that lane k holds group k/2 of block k%2
// (low nibbles for groups 0..3 = the lower 256 bits, high nibbles for groups 4..7), then centred: q − 8.
inline WeightPair weight_pair(const BlockQ4_0* w) {
  const __m256i both =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[0].qs))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[1].qs)), 1);
  const __m512i idx = _mm512_set_epi32(7, 3, 6, 2, 5, 1, 4, 0, 7, 3, 6, 2, 5, 1, 4, 0);
  __m512i v = _mm512_permutexvar_epi32(idx, _mm512_castsi256_si512(both));
  v = _mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4);
  const __m512i q = _mm512_sub_epi8(_mm512_and_si512(v, _mm512_set1_epi8(0x0F)), _mm512_set1_epi8(8));
  return {q, neg_corr(q), alt_scales(w[0].d, w[1].d)};
}
template <typename Block>
inline __m256i weight_block(const Block& w) {
  return avx2::quants(w);
}
// Q4_1, Q5_0, Q5_1, IQ4_NL: the two blocks' s8 quants in element order, interleaved as ActQ8 pairs them.
template <typename Block>
inline WeightPair weight_pair(const Block* w) {
  const __m512i q = interleave_blocks(weight_block(w[0]), weight_block(w[1]));
  return {q, neg_corr(q), alt_scales(w[0].d, w[1].d)};
}

template <int R, typename Block>
void rows_q(const Block* w, const ActQ8& x, float* out) {
  const int64_t nb = x.nb, row_bytes = nb * kQK8_0;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const uint8_t* xq[R];
  const float* xd[R];
  for (int r = 0; r < R; ++r) xq[r] = x.qs + r * row_bytes, xd[r] = x.d + r * nb;
  // Pair b/2 goes into accumulator (b/2) % 2; the loop is unrolled by two pairs so the index is static.
  auto step = [&](int64_t b, int k) {
    const WeightPair wp = weight_pair(w + b);
    for (int r = 0; r < R; ++r) {
      const __m512i p = _mm512_dpbusd_epi32(wp.neg_corr, load512(xq[r] + 32 * b), wp.q);
      acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wp.d, alt_scales(xd[r] + b)), acc[r][k]);
    }
  };
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) step(b, 0), step(b + 2, 1);
  if (b + 2 <= nb) step(b, 0), b += 2;
  for (int r = 0; r < R; ++r) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
    if (b < nb) {  // unpaired last block, stored plainly
      const __m256i q = weight_block(w[b]);
      const __m256i corr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(-128), q);
      const __m256i p = _mm256_sub_epi32(
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), load256(x.qs + r * row_bytes + 32 * b), q), corr);
      s += hsum256(_mm256_cvtepi32_ps(p)) * (f16(w[b].d) * x.d[r * nb + b]);
    }
    out[r] = s + avx2::min_terms(w, x.s ? x.s + r * nb : nullptr, nb);
  }
}

// rows_q for a runtime R, through by_tokens.
template <int R>
struct RowsQ {
  template <typename Block>
  static void run(const Block* w, const ActQ8& x, float* out) {
    rows_q<R>(w, x, out);
  }
};
void gemv_q8_0(const BlockQ8_0* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q4_0(const BlockQ4_0* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q4_1(const BlockQ4_1* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q5_0(const BlockQ5_0* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q5_1(const BlockQ5_1* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_iq4_nl(const BlockIQ4_NL* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }

// roundf (half away from zero), exactly: t = trunc(v) and v − t is exact, so |v − t| ≥ ½ decides the step.
inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
  const __mmask16 step = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));  // ±1 as v
  return _mm512_mask_add_ps(t, step, t, one);
}

// One block as quantize_row Q8_0 computes it (the same amax, d = amax/127, id = 1/d, roundf(x·id)), as 32 bytes
// q + 128, and its fp16-rounded scale.
inline __m256i quantize_block(const float* xb, float* d_out) {
  const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = f16(f32_to_fp16(d));
  const __m512 idv = _mm512_set1_ps(id);
  const __m512i q0 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v0, idv)));
  const __m512i q1 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v1, idv)));
  const __m256i q = _mm256_set_m128i(_mm512_cvtepi32_epi8(q1), _mm512_cvtepi32_epi8(q0));
  return _mm256_add_epi8(q, _mm256_set1_epi8(-128));
}

void quantize_act_q8(const float* x, uint8_t* qs, float* d, int64_t n) {
  const int64_t nb = n / kQK8_0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i q0 = quantize_block(x + b * kQK8_0, d + b);
    const __m256i q1 = quantize_block(x + (b + 1) * kQK8_0, d + b + 1);
    _mm512_storeu_si512(qs + b * kQK8_0, interleave_blocks(q0, q1));
  }
  if (b < nb) _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * kQK8_0), quantize_block(x + b * kQK8_0, d + b));
}

void quantize_act_q8s(const float* x, int8_t* qs, float* d, int32_t* sums, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const __m256i q = quantize_block(x + b * kQK8_0, d + b);  // q + 128
    const __m256i sad = _mm256_sad_epu8(q, _mm256_setzero_si256());
    const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    sums[b] = static_cast<int32_t>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * kQK8_0), _mm256_xor_si256(q, _mm256_set1_epi8(-128)));
  }
}

void to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

// Integer rounding as f32_to_bf16 (nearest even, NaN kept quiet); vcvtneps2bf16 would flush denormals.
void to_bf16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void round_f16(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  if (i < n) round_through_half(x + i, y + i, n - i, true);
}
void round_bf16(const float* x, float* y, int64_t n) {
  uint16_t h[256];
  for (int64_t i = 0; i < n; i += 256) {
    const int64_t m = std::min<int64_t>(256, n - i);
    to_bf16(x + i, h, m);
    int64_t j = 0;
    for (; j + 16 <= m; j += 16) _mm512_storeu_ps(y + i + j, load_half<false>(h + j));
    for (; j < m; ++j) y[i + j] = bf16_to_f32(h[j]);
  }
}

// Sixteen int16 lanes of a, then sixteen of b: the scales of two 32-element sub-blocks after maddubs.
inline __m512i two_scales_i16(int a, int b) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(a)), _mm256_set1_epi16(static_cast<int16_t>(b)), 1);
}
inline __m256i fifth_bit(__m256i qh, int shift) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), _mm256_set1_epi8(1)), 4);
}

// Q4_K / Q5_K: one 64-element chunk (two sub-blocks) per step. q (u8 ≤ 31) × x (s8) pairs via maddubs (no
// saturation: 2·31·127 < 2¹⁵), then vpdpwssd with the sub-block scales: exact int32 per block. The weight block is
// unpacked once for all R rows. Each row keeps float accumulators across blocks, d·Σ and dmin·Σ m·bsums in
// vector lanes, reduced once at the end.
template <bool kFifthBit, int R, typename Block>
void rows_k_scale_min(const Block* w, const BlockQ8_K* x, int64_t xs, int64_t nb, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m512 accd[R];
  __m256 accm[R];
  for (int r = 0; r < R; ++r) accd[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // The 8 six-bit scales and mins (k_scale_min) unpacked with 32-bit word operations.
    uint32_t u[3];
    __builtin_memcpy(u, w[b].scales, sizeof u);
    const uint64_t sc8 = (u[0] & 0x3f3f3f3fu) | uint64_t{(u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4)}
                                                    << 32;
    const uint64_t m8 =
        (u[1] & 0x3f3f3f3fu) | uint64_t{((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4)} << 32;
    const auto sc = [sc8](int j) { return static_cast<int>((sc8 >> (8 * j)) & 0xff); };
    const __m128i mb = _mm_cvtsi64_si128(static_cast<int64_t>(m8));
    const __m256i mv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));  // m_j for bsums 2j and 2j + 1
    __m512i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load256(reinterpret_cast<const BlockQ5_K*>(&w[b])->qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load256(w[b].qs + 32 * c);
      __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kFifthBit) {
        lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * c));
        hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * c + 1));
      }
      const __m512i q = join(lo, hi), scv = two_scales_i16(sc(2 * c), sc(2 * c + 1));
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_dpwssd_epi32(acc[r], _mm512_maddubs_epi16(q, load512(x[r * xs + b].qs + 64 * c)), scv);
    }
    const float dw = f16(w[b].d), dminw = f16(w[b].dmin);
    for (int r = 0; r < R; ++r) {
      const BlockQ8_K& xb = x[r * xs + b];
      accd[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), _mm512_set1_ps(xb.d * dw), accd[r]);
      const __m256i summ = _mm256_madd_epi16(load256(xb.bsums), mv);
      accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_set1_ps(xb.d * dminw), accm[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(accd[r]) - hsum256(accm[r]);
}

// Q6_K: 64 elements (four 16-element sub-blocks) per step; each sub-block's scale covers 8 int16 lanes. The −32
// offset comes off in int32 through Σ sc_j·bsums_j before the block's lanes go into the row's float accumulator.
template <int R>
void rows_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t xs, int64_t nb, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  // vpermw indices: lane i takes scale i/8 (first four sub-blocks of a half) or 4 + i/8 (last four).
  alignas(64) int16_t idx_lo[32], idx_hi[32];
  for (int i = 0; i < 32; ++i) idx_lo[i] = static_cast<int16_t>(i / 8), idx_hi[i] = static_cast<int16_t>(4 + i / 8);
  const __m512i ilo = _mm512_load_si512(idx_lo), ihi = _mm512_load_si512(idx_hi);
  __m512 accd[R];
  for (int r = 0; r < R; ++r) accd[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(w[b].ql + 64 * h), ql1 = load256(w[b].ql + 64 * h + 32);
      const __m256i qh = load256(w[b].qh + 32 * h);
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
      // The 8 scales of this half as int16 lanes 0..7, then spread 8 lanes each.
      const __m512i sch = _mm512_castsi256_si512(h == 0 ? sc16 : _mm256_permute2x128_si256(sc16, sc16, 0x11));
      const __m512i qa = join(q0, q1), qb = join(q2, q3);
      const __m512i sa = _mm512_permutexvar_epi16(ilo, sch), sb = _mm512_permutexvar_epi16(ihi, sch);
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = x[r * xs + b].qs + 128 * h;
        acc[r] = _mm512_dpwssd_epi32(acc[r], _mm512_maddubs_epi16(qa, load512(xq)), sa);
        acc[r] = _mm512_dpwssd_epi32(acc[r], _mm512_maddubs_epi16(qb, load512(xq + 64)), sb);
      }
    }
    const float dw = f16(w[b].d);
    for (int r = 0; r < R; ++r) {
      const BlockQ8_K& xb = x[r * xs + b];
      const __m256i offs = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(xb.bsums)), 5);  // 32·Σ sc_j·bsums_j
      const __m512i sumi = _mm512_sub_epi32(acc[r], _mm512_zextsi256_si512(offs));
      accd[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(xb.d * dw), accd[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(accd[r]);
}

// Single-row entries and the four-row entries of the table: the R = 1 and R = 4 instances.
template <auto Rows, typename W, typename X>
float one(const W* w, const X* x, int64_t n) {
  float o;
  Rows(w, x, 0, n, &o);
  return o;
}
float dot_f16(const uint16_t* w, const uint16_t* x, int64_t n) { return one<rows_half<true, 1>>(w, x, n); }
float dot_bf16(const uint16_t* w, const uint16_t* x, int64_t n) { return one<rows_half<false, 1>>(w, x, n); }
float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nb) {
  return one<rows_k_scale_min<false, 1, BlockQ4_K>>(w, x, nb);
}
float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, int64_t nb) {
  return one<rows_k_scale_min<true, 1, BlockQ5_K>>(w, x, nb);
}
float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) { return one<rows_q6_k<1>>(w, x, nb); }

// One 64-byte line, loaded as `how` says.
inline __m512i stream_line(const uint8_t* q, StreamLoad how) {
  if (how == StreamLoad::kNonTemporal) return _mm512_stream_load_si512(const_cast<uint8_t*>(q));
  return _mm512_load_si512(q);
}

// 64-byte loads, four lines per iteration into four accumulators (u64 lanes: the sum is the generic one's, mod 2⁶⁴).
uint64_t stream_sum(const uint8_t* p, int64_t bytes, StreamLoad how) {
  __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  int64_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    if (how == StreamLoad::kPrefetch)
      for (int l = 0; l < 256; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kStreamPrefetchBytes + l), _MM_HINT_T0);
    for (int l = 0; l < 4; ++l) a[l] = _mm512_add_epi64(a[l], stream_line(p + i + 64 * l, how));
  }
  for (; i < bytes; i += 64) a[0] = _mm512_add_epi64(a[0], stream_line(p + i, how));
  // Lanes added as unsigned (GCC's _mm512_reduce_add_epi64 adds them as signed long long: overflow, UB).
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a[0], a[1]), _mm512_add_epi64(a[2], a[3])));
  uint64_t sum = 0;
  for (uint64_t v : lanes) sum += v;
  return sum;
}

constexpr CpuKernels kAvx512 = {
    .isa = "avx512_vnni",
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q4_k = dot_q4_k,
    .dot_q5_k = dot_q5_k,
    .dot_q6_k = dot_q6_k,
    .dot4_f16 = rows_half<true, 4>,
    .dot4_bf16 = rows_half<false, 4>,
    .dot4_q4_k = rows_k_scale_min<false, 4, BlockQ4_K>,
    .dot4_q5_k = rows_k_scale_min<true, 4, BlockQ5_K>,
    .dot4_q6_k = rows_q6_k<4>,
    .tile_f32 = tile_f32,
    .dot_f32_f16 = dot_f32_f16,
    .wsum_f32 = wsum_f32,
    .wsum_f16 = wsum_f16,
    .scores_f32 = scores_f32,
    .scores_f16 = scores_f16,
    .scores_multi_f32 = scores_multi_f32,
    .scores_multi_f16 = scores_multi_f16,
    .wsum_multi_f32 = wsum_multi_f32,
    .wsum_multi_f16 = wsum_multi_f16,
    .scores_q8_0 = avx2::scores_q8_0,
    .wsum_q8_0 = avx2::wsum_q8_0,
    .scores_fp8 = avx2::scores_fp8,
    .wsum_fp8 = avx2::wsum_fp8,
    .scores_multi_q8_0 = scores_multi_q8_0,
    .wsum_multi_q8_0 = wsum_multi_q8_0,
    .scores_multi_fp8 = scores_multi_fp8,
    .wsum_multi_fp8 = wsum_multi_fp8,
    .softmax = softmax,
    .silu_mul = silu_mul,
    .gemv_q8_0 = gemv_q8_0,
    .gemv_q4_0 = gemv_q4_0,
    .gemv_q4_1 = gemv_q4_1,
    .gemv_q5_0 = gemv_q5_0,
    .gemv_q5_1 = gemv_q5_1,
    .gemv_iq4_nl = gemv_iq4_nl,
    .quantize_act_q8 = quantize_act_q8,
    .quantize_q8_k = avx2::quantize_q8_k,
    .gemm_f32_x16 = gemm_f32_x16,
    .gemm_f16_x16 = gemm_f16_x16,
    .gemm_bf16_x16 = gemm_bf16_x16,
    .gemm_q8_0_x16 = gemm_q8_0_x16,
    .gemm_q4_0_x16 = gemm_q4_0_x16,
    .gemm_iq4_nl_x16 = gemm_iq4_nl_x16,
    .gemm_q5_0_x16 = gemm_q5_0_x16,
    .gemm_q4_1_x16 = gemm_q4_1_x16,
    .gemm_q5_1_x16 = gemm_q5_1_x16,
    .gemm_q4_k_x16 = gemm_q4_k_x16,
    .gemm_q5_k_x16 = gemm_q5_k_x16,
    .gemm_q6_k_x16 = gemm_q6_k_x16,
    .quantize_act_q8s = quantize_act_q8s,
    .to_f16 = to_f16,
    .to_bf16 = to_bf16,
    .round_f16 = round_f16,
    .round_bf16 = round_bf16,
    .stream_sum = stream_sum,
    .spreads_attention_prefetch = kSpreadQ8_0 | kSpreadFp8,
};

// The same table plus the vdpbf16ps kernel for packed BF16 weights, for CPUs with AVX512_BF16.
const CpuKernels kAvx512Bf16 = [] {
  CpuKernels k = kAvx512;
  k.isa = "avx512_vnni+avx512_bf16";
  k.gemm_bf16_dp_x16 = gemm_bf16_dp_x16;
  return k;
}();

}  // namespace

const CpuKernels* avx512_kernels() { return &kAvx512; }
const CpuKernels* avx512_bf16_kernels() { return &kAvx512Bf16; }

}  // namespace kvik
