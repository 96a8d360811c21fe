// AVX-512 (F/BW/VL/DQ) + VNNI kernels, compiled with those flags (CMakeLists.txt) and chosen at run time only on
// CPUs that have all of them (dispatch.cpp). Integer dot products use vpdpbusd (u8 × s8 → s32, four pairs per
// lane): Q4_0's nibbles are already unsigned; for Q8_0 × Q8_0 the sign of w moves onto x (|w| · sign(w)·x).
// GCC 12's AVX-512 headers build casts and reductions from _mm512_undefined_*(), which -Wall reports as
// uninitialised (a known false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kv_quant_kernels.h"

namespace kvik {
namespace {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }  // exact, as fp16_to_f32

// The f16/bf16 and K-quant dot products below are templates over R activation rows sharing one pass over the
// weight row: row r of x starts at x + r·xs and gets its own accumulators, updated by exactly the instructions the
// R = 1 instance uses, so dot4_* (R = 4) returns bit for bit what four dot_* (R = 1) calls return. The tiled matmul
// relies on that for batch invariance (as it does on the F32 tile's and gemv_q's shape invariance).

inline __mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1); }

// One f32 row pair (attention's q·k): four accumulators over 64-float steps, a masked tail.
float dot_f32(const float* w, const float* x, int64_t n) {
  __m512 a[4];
  for (int k = 0; k < 4; ++k) a[k] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 4; ++k) a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16 * k), _mm512_loadu_ps(x + i + 16 * k), a[k]);
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

inline __m512 bf16_widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
template <bool kF16>
inline __m512 load_half(const uint16_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return kF16 ? _mm512_cvtph_ps(v) : bf16_widen(v);
}
template <bool kF16>
inline __m512 load_half(const uint16_t* p, __mmask16 m) {
  const __m256i v = _mm256_maskz_loadu_epi16(m, p);
  return kF16 ? _mm512_cvtph_ps(v) : bf16_widen(v);
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

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline float hsum256(__m256 p) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// K<R>::run(args...) for a runtime token count R in 1..8 (8 for more): one instance per R, so that each keeps its
// per-token accumulators in registers.
template <template <int> class K, typename... A>
void by_tokens(int64_t R, const A&... a) {
  switch (R) {
    case 1: return K<1>::run(a...);
    case 2: return K<2>::run(a...);
    case 3: return K<3>::run(a...);
    case 4: return K<4>::run(a...);
    case 5: return K<5>::run(a...);
    case 6: return K<6>::run(a...);
    case 7: return K<7>::run(a...);
    default: return K<8>::run(a...);
  }
}

// Q8_0 / Q4_0 × ActQ8. Per pair of weight blocks, shared by the R activation rows: the 64 weight bytes as s8 in the
// ActQ8 interleave (32-bit lanes alternate between the two blocks), −128·Σw per lane (to take the +128 of the
// activation bytes off, exactly: every lane sum stays far inside int32), and the two weight scales alternating.
// Per row: one vpdpbusd, a conversion and one FMA with the scales d_w·d_x. Two accumulators per row (even and odd
// pairs) for instruction-level parallelism at R = 1; the odd last block of a row goes through a 256-bit step.
struct WeightPair {
  __m512i q;        // s8, interleaved
  __m512i neg_corr;  // −128·Σ q per lane
  __m512 d;         // d0, d1, d0, d1, ...
};
inline __m512i interleave_blocks(__m256i a, __m256i b) {
  const __m512i idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutex2var_epi32(_mm512_castsi256_si512(a), idx, _mm512_castsi256_si512(b));
}
inline __m512i neg_corr(__m512i q) {
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), q));
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
  const __m256i both = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[0].qs))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[1].qs)), 1);
  const __m512i idx = _mm512_set_epi32(7, 3, 6, 2, 5, 1, 4, 0, 7, 3, 6, 2, 5, 1, 4, 0);
  __m512i v = _mm512_permutexvar_epi32(idx, _mm512_castsi256_si512(both));
  v = _mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4);
  const __m512i q = _mm512_sub_epi8(_mm512_and_si512(v, _mm512_set1_epi8(0x0F)), _mm512_set1_epi8(8));
  return {q, neg_corr(q), alt_scales(w[0].d, w[1].d)};
}
template <typename Block>
inline __m256i weight_block(const Block& w) { return avx2::quants(w); }
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
      const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), load256(x.qs + r * row_bytes + 32 * b), q), corr);
      s += hsum256(_mm256_cvtepi32_ps(p)) * (f16(w[b].d) * x.d[r * nb + b]);
    }
    out[r] = s + avx2::min_terms(w, x.s ? x.s + r * nb : nullptr, nb);
  }
}

// rows_q for a runtime R, through by_tokens.
template <int R>
struct RowsQ {
  template <typename Block>
  static void run(const Block* w, const ActQ8& x, float* out) { rows_q<R>(w, x, out); }
};
void gemv_q8_0(const BlockQ8_0* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q4_0(const BlockQ4_0* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q4_1(const BlockQ4_1* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q5_0(const BlockQ5_0* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_q5_1(const BlockQ5_1* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }
void gemv_iq4_nl(const BlockIQ4_NL* w, const ActQ8& x, int64_t R, float* out) { by_tokens<RowsQ>(R, w, x, out); }

// Packed weights (packed.h): lanes run across the group's 16 rows. Per block the weight vectors are loaded (and
// Q4's nibbles split) once for all R tokens; per token each 64-byte vector meets the activation's matching 4 bytes
// broadcast (vpdpbusd, u8 weight × s8 activation), the integer sum starts at the offset correction, and one
// conversion and one FMA apply the block's 16 weight scales times the token's scale. The operations and their
// order are those of the *_x16_ref functions, so the results are theirs bit for bit.
inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// F32: per input k, the 16 rows' weights (one load) times the input broadcast, into two accumulators per token
// (even and odd k) that are added at the end: 2R independent FMA chains.
template <int R>
void gemm_f32_x16_r(const uint8_t* g, int64_t n, const float* x, int64_t xs, float* y, int64_t ys) {
  const float* w = reinterpret_cast<const float*>(g);
  __m512 a0[R], a1[R];
  for (int t = 0; t < R; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    const __m512 w0 = _mm512_load_ps(w + k * kPackRows), w1 = _mm512_load_ps(w + (k + 1) * kPackRows);
    for (int t = 0; t < R; ++t) {
      a0[t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * xs + k]), a0[t]);
      a1[t] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[t * xs + k + 1]), a1[t]);
    }
  }
  if (k < n) {
    const __m512 w0 = _mm512_load_ps(w + k * kPackRows);
    for (int t = 0; t < R; ++t) a0[t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * xs + k]), a0[t]);
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, _mm512_add_ps(a0[t], a1[t]));
}

template <int R>
void gemm_q8_0_x16_r(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y, int64_t ys) {
  __m512 acc[R];
  for (int t = 0; t < R; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i w[8];
    const uint8_t* qs = g + packed_qs_offset(b, kQ8_0PackedQs);
    for (int k = 0; k < 8; ++k) w[k] = _mm512_load_si512(qs + 64 * k);
    const __m512 dw = _mm512_cvtph_ps(load256(g + packed_d_offset(b, kQ8_0PackedQs)));
    for (int t = 0; t < R; ++t) {
      const int8_t* xq = x.qs + (t * nb + b) * kQK8_0;
      __m512i s = _mm512_set1_epi32(-128 * x.sums[t * nb + b]);
      for (int k = 0; k < 8; ++k) s = _mm512_dpbusd_epi32(s, w[k], bcast4(xq + 4 * k));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[t * nb + b])), acc[t]);
    }
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
}

// Q4_0 and IQ4_NL (kCodebook: each nibble looked up as kIQ4NLValues + 128 by vpshufb, offset 128 instead of 8).
template <int R, bool kCodebook>
void gemm_q4_0_x16_r(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y, int64_t ys) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i book = _mm512_add_epi8(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues))), _mm512_set1_epi8(-128));
  constexpr int32_t kOffset = kCodebook ? 128 : 8;
  __m512 acc[R];
  for (int t = 0; t < R; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i lo[4], hi[4];
    for (int v = 0; v < 4; ++v) {
      const __m512i raw = _mm512_load_si512(g + packed_qs_offset(b, kQ4_0PackedQs) + 64 * v);
      lo[v] = _mm512_and_si512(raw, m4), hi[v] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      if constexpr (kCodebook) lo[v] = _mm512_shuffle_epi8(book, lo[v]), hi[v] = _mm512_shuffle_epi8(book, hi[v]);
    }
    const __m512 dw = _mm512_cvtph_ps(load256(g + packed_d_offset(b, kQ4_0PackedQs)));
    for (int t = 0; t < R; ++t) {
      const int8_t* xq = x.qs + (t * nb + b) * kQK8_0;
      __m512i s = _mm512_set1_epi32(-kOffset * x.sums[t * nb + b]);
      for (int v = 0; v < 4; ++v) {
        s = _mm512_dpbusd_epi32(s, lo[v], bcast4(xq + 4 * v));
        s = _mm512_dpbusd_epi32(s, hi[v], bcast4(xq + 16 + 4 * v));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[t * nb + b])), acc[t]);
    }
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
}

// Q4_K / Q5_K: per sub-block j the 8 quant vectors (nibbles, with Q5_K's fifth bits or-ed in at bit 4) meet the
// token's 32 activations (exact int32), times the rows' 6-bit scales into the super-block's int32 sum; the min term
// Σ_j m_j·Σx_j comes from vpdpwssd over sub-block pairs.
template <int R, bool kFifth>
void gemm_k_scale_min_x16_r(const uint8_t* g, int64_t nb, const ActQ8KS& x, float* y, int64_t ys) {
  constexpr PackedKScaleMin L = kFifth ? kPackedQ5K : kPackedQ4K;
  const __m512i m4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
  __m512 acc[R];
  for (int t = 0; t < R; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = g + b * L.record;
    __m512i isum[R];
    for (int t = 0; t < R; ++t) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      __m512i lo[4], hi[4];
      __m512i fb = _mm512_setzero_si512();
      if constexpr (kFifth) fb = _mm512_load_si512(rec + L.fifth + 64 * j);
      for (int v = 0; v < 4; ++v) {
        const __m512i raw = _mm512_load_si512(rec + j * 256 + 64 * v);
        lo[v] = _mm512_and_si512(raw, m4), hi[v] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        if constexpr (kFifth) {  // bit v → bit 4 and bit 4 + v → bit 4 (epi16 shifts: strays are masked off)
          lo[v] = _mm512_or_si512(lo[v], _mm512_and_si512(_mm512_slli_epi16(fb, 4 - v), bit4));
          hi[v] = _mm512_or_si512(hi[v], _mm512_and_si512(_mm512_srli_epi16(fb, v), bit4));
        }
      }
      const __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + L.sc + 16 * j)));
      for (int t = 0; t < R; ++t) {
        const int8_t* xq = x.x[t * nb + b].qs + 32 * j;
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], bcast4(xq));
        s = _mm512_dpbusd_epi32(s, hi[0], bcast4(xq + 16));
        for (int v = 1; v < 4; ++v) {
          s = _mm512_dpbusd_epi32(s, lo[v], bcast4(xq + 4 * v));
          s = _mm512_dpbusd_epi32(s, hi[v], bcast4(xq + 16 + 4 * v));
        }
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s, sc));
      }
    }
    const __m512 dw = _mm512_cvtph_ps(load256(rec + L.d)), dminw = _mm512_cvtph_ps(load256(rec + L.dmin));
    __m512i mv[4];
    for (int p = 0; p < 4; ++p) mv[p] = _mm512_cvtepu8_epi16(load256(rec + L.m + 32 * p));
    for (int t = 0; t < R; ++t) {
      const int8_t* s32 = reinterpret_cast<const int8_t*>(x.sums32 + (t * nb + b) * 8);
      __m512i m = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) m = _mm512_dpwssd_epi32(m, mv[p], bcast4(s32 + 4 * p));
      const __m512 dx = _mm512_set1_ps(x.x[t * nb + b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dminw, dx), acc[t]);
    }
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
}

// Q6_K: per 32-element chunk c the nibbles with their high bit pairs or-ed in at bits 4..5 give sub-blocks 2c (low
// nibbles) and 2c + 1 (high); each sub-block's int32 sum is multiplied by its signed scale, and the −32 offset
// comes off per chunk with vpdpwssd of the (−32·sc_2c, −32·sc_2c+1) pairs by the token's (bsums_2c, bsums_2c+1).
inline __m512i q6_high_bits(__m512i h, int v) {  // bits 2v..2v+1 of each byte → bits 4..5 (strays masked off)
  const __m512i m = _mm512_set1_epi8(0x30);
  switch (v) {
    case 0: return _mm512_and_si512(_mm512_slli_epi16(h, 4), m);
    case 1: return _mm512_and_si512(_mm512_slli_epi16(h, 2), m);
    case 2: return _mm512_and_si512(h, m);
    default: return _mm512_and_si512(_mm512_srli_epi16(h, 2), m);
  }
}

template <int R>
void gemm_q6_k_x16_r(const uint8_t* g, int64_t nb, const ActQ8KS& x, float* y, int64_t ys) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int t = 0; t < R; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = g + b * kQ6KRecord;
    __m512i isum[R];
    for (int t = 0; t < R; ++t) isum[t] = _mm512_setzero_si512();
    for (int c = 0; c < 8; ++c) {
      const uint8_t* ch = rec + c * kQ6KChunk;
      const __m512i hl = _mm512_load_si512(ch + 256), hh = _mm512_load_si512(ch + 320);
      __m512i lo[4], hi[4];
      for (int v = 0; v < 4; ++v) {
        const __m512i raw = _mm512_load_si512(ch + 64 * v);
        lo[v] = _mm512_or_si512(_mm512_and_si512(raw, m4), q6_high_bits(hl, v));
        hi[v] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), q6_high_bits(hh, v));
      }
      const __m512i pair = _mm512_cvtepi8_epi16(load256(rec + kQ6KSc + 32 * c));  // (sc_2c, sc_2c+1) per row
      const __m512i sc_lo = _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16), sc_hi = _mm512_srai_epi32(pair, 16);
      const __m512i neg32 = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(pair, 5));
      for (int t = 0; t < R; ++t) {
        const BlockQ8_K& xb = x.x[t * nb + b];
        const int8_t* xq = xb.qs + 32 * c;
        __m512i s_lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], bcast4(xq));
        __m512i s_hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], bcast4(xq + 16));
        for (int v = 1; v < 4; ++v) {
          s_lo = _mm512_dpbusd_epi32(s_lo, lo[v], bcast4(xq + 4 * v));
          s_hi = _mm512_dpbusd_epi32(s_hi, hi[v], bcast4(xq + 16 + 4 * v));
        }
        __m512i sum = _mm512_add_epi32(_mm512_mullo_epi32(s_lo, sc_lo), _mm512_mullo_epi32(s_hi, sc_hi));
        sum = _mm512_dpwssd_epi32(sum, neg32, bcast4(reinterpret_cast<const int8_t*>(xb.bsums + 2 * c)));
        isum[t] = _mm512_add_epi32(isum[t], sum);
      }
    }
    const __m512 dw = _mm512_cvtph_ps(load256(rec + kQ6KD));
    for (int t = 0; t < R; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, _mm512_set1_ps(x.x[t * nb + b].d)), acc[t]);
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
}

template <int R> struct F32x16 { static constexpr auto run = gemm_f32_x16_r<R>; };
template <int R> struct Q8_0x16 { static constexpr auto run = gemm_q8_0_x16_r<R>; };
template <int R> struct Q4_0x16 { static constexpr auto run = gemm_q4_0_x16_r<R, false>; };
template <int R> struct IQ4_NLx16 { static constexpr auto run = gemm_q4_0_x16_r<R, true>; };
template <int R> struct Q4_Kx16 { static constexpr auto run = gemm_k_scale_min_x16_r<R, false>; };
template <int R> struct Q5_Kx16 { static constexpr auto run = gemm_k_scale_min_x16_r<R, true>; };
template <int R> struct Q6_Kx16 { static constexpr auto run = gemm_q6_k_x16_r<R>; };
void gemm_f32_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  by_tokens<F32x16>(R, g, n, x, xs, y, ys);
}
void gemm_q8_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q8_0x16>(R, g, nb, x, y, ys);
}
void gemm_q4_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q4_0x16>(R, g, nb, x, y, ys);
}
void gemm_iq4_nl_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  by_tokens<IQ4_NLx16>(R, g, nb, x, y, ys);
}
void gemm_q4_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q4_Kx16>(R, g, nb, x, y, ys);
}
void gemm_q5_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q5_Kx16>(R, g, nb, x, y, ys);
}
void gemm_q6_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q6_Kx16>(R, g, nb, x, y, ys);
}

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
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
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
    const uint64_t sc8 = (u[0] & 0x3f3f3f3fu) | uint64_t{(u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4)} << 32;
    const uint64_t m8 = (u[1] & 0x3f3f3f3fu) | uint64_t{((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4)} << 32;
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
      const __m256i q1 =
          _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
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
float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nb) { return one<rows_k_scale_min<false, 1, BlockQ4_K>>(w, x, nb); }
float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, int64_t nb) { return one<rows_k_scale_min<true, 1, BlockQ5_K>>(w, x, nb); }
float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) { return one<rows_q6_k<1>>(w, x, nb); }

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) { quantize_row_q8_k(x, y, n); }

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
  if constexpr (kF16) return load_half<true>(static_cast<const uint16_t*>(v) + i, m);
  else return _mm512_maskz_loadu_ps(m, static_cast<const float*>(v) + i);
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
    .scores_q8_0 = avx2::scores_q8_0,
    .wsum_q8_0 = avx2::wsum_q8_0,
    .scores_fp8 = avx2::scores_fp8,
    .wsum_fp8 = avx2::wsum_fp8,
    .softmax = softmax,
    .silu_mul = silu_mul,
    .gemv_q8_0 = gemv_q8_0,
    .gemv_q4_0 = gemv_q4_0,
    .gemv_q4_1 = gemv_q4_1,
    .gemv_q5_0 = gemv_q5_0,
    .gemv_q5_1 = gemv_q5_1,
    .gemv_iq4_nl = gemv_iq4_nl,
    .quantize_act_q8 = quantize_act_q8,
    .quantize_q8_k = quantize_q8_k,
    .gemm_f32_x16 = gemm_f32_x16,
    .gemm_q8_0_x16 = gemm_q8_0_x16,
    .gemm_q4_0_x16 = gemm_q4_0_x16,
    .gemm_iq4_nl_x16 = gemm_iq4_nl_x16,
    .gemm_q4_k_x16 = gemm_q4_k_x16,
    .gemm_q5_k_x16 = gemm_q5_k_x16,
    .gemm_q6_k_x16 = gemm_q6_k_x16,
    .quantize_act_q8s = quantize_act_q8s,
    .to_f16 = to_f16,
    .to_bf16 = to_bf16,
};

}  // namespace

const CpuKernels* avx512_kernels() { return &kAvx512; }

}  // namespace kvik
