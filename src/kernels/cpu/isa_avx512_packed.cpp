// AVX-512 VNNI kernels on repacked weights (packed.h), for the table in isa_avx512.cpp.
// GCC 12's AVX-512 headers build casts and reductions from _mm512_undefined_*(), which -Wall reports as
// uninitialised (a known false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/isa_avx512_common.h"

namespace kvik::avx512 {

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
    prefetch_span(g + k * kPackRows * 4, 128);
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

// F16 / BF16: F32's loop over 16-bit weights widened per load (x is already rounded through the weight's type).
// F16 stores inputs k and k + 1 as two 32-byte vectors; BF16 as one 64-byte vector of pairs (packed.h), whose words
// shifted left by 16 are input k's weights and masked to their high half input k + 1's.
template <bool kF16>
inline void load_half_pair(const uint16_t* w, int64_t k, __m512& w0, __m512& w1) {
  if constexpr (kF16) {
    w0 = load_half<true>(w + k * kPackRows), w1 = load_half<true>(w + (k + 1) * kPackRows);
  } else {
    const __m512i v = _mm512_loadu_si512(w + k * kPackRows);  // pair k / 2
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u))));
  }
}

// F16 keeps F32's two sums per token (even and odd inputs); BF16 has one, input k + 1 after input k
// (gemm_bf16_x16_ref), the order AMX-BF16 and the vdpbf16ps kernel below add them in.
template <int R, bool kF16>
void gemm_half_x16_r(const uint8_t* g, int64_t n, const float* x, int64_t xs, float* y, int64_t ys) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(g);
  __m512 a0[R], a1[R];
  for (int t = 0; t < R; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    prefetch_span(g + k * kPackRows * 2, 64);
    __m512 w0, w1;
    load_half_pair<kF16>(w, k, w0, w1);
    for (int t = 0; t < R; ++t) {
      a0[t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * xs + k]), a0[t]);
      __m512& odd = kF16 ? a1[t] : a0[t];
      odd = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[t * xs + k + 1]), odd);
    }
  }
  if (k < n) {  // an odd last input (BF16: its pair's zero partner is not used)
    __m512 w0, w1;
    if constexpr (kF16)
      w0 = load_half<true>(w + k * kPackRows);
    else
      load_half_pair<false>(w, k, w0, w1);
    for (int t = 0; t < R; ++t) a0[t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * xs + k]), a0[t]);
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, kF16 ? _mm512_add_ps(a0[t], a1[t]) : a0[t]);
}

// BF16 with FMAs over G groups (gb bytes apart) at once: a lone token's one sum per output is a chain of dependent
// fmas, so a pass takes several groups' chains side by side (each chain's fmas are those of G = 1, in order).
template <int R, int G>
void gemm_bf16_x16_rg(const uint8_t* g, size_t gb, int64_t n, const float* x, int64_t xs, float* y, int64_t ys) {
  __m512 acc[G][R];
  for (int j = 0; j < G; ++j)
    for (int t = 0; t < R; ++t) acc[j][t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    __m512 w0[G], w1[G];
    for (int j = 0; j < G; ++j) {
      prefetch_span(g + j * gb + k * kPackRows * 2, 64);
      load_half_pair<false>(reinterpret_cast<const uint16_t*>(g + j * gb), k, w0[j], w1[j]);
    }
    for (int t = 0; t < R; ++t) {
      const __m512 x0 = _mm512_set1_ps(x[t * xs + k]), x1 = _mm512_set1_ps(x[t * xs + k + 1]);
      for (int j = 0; j < G; ++j) acc[j][t] = _mm512_fmadd_ps(w1[j], x1, _mm512_fmadd_ps(w0[j], x0, acc[j][t]));
    }
  }
  if (k < n)  // an odd last input (its pair's zero partner is not used)
    for (int j = 0; j < G; ++j) {
      __m512 w0, w1;
      load_half_pair<false>(reinterpret_cast<const uint16_t*>(g + j * gb), k, w0, w1);
      for (int t = 0; t < R; ++t) acc[j][t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * xs + k]), acc[j][t]);
    }
  for (int j = 0; j < G; ++j)
    for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys + 16 * j, acc[j][t]);
}

// BF16 on vdpbf16ps (AVX512_BF16): per pair p one 64-byte weight load, each word rotated by 16 bits (input 2p's weight
// in the high half), and per token one instruction against the token's pair word broadcast (bf16_pair_activations
// with swap: input 2p in the high half too). vdpbf16ps adds the high halves' product to the sum first, then the low
// halves', each rounded to nearest even: input 2p, then 2p + 1, gemm_bf16_x16_ref's single fp32 sum (32 multiply-adds
// per instruction where the FMA kernel above does 16). Like AMX-BF16 it reads denormals as zero and flushes denormal
// sums, which the reference does not.
inline __m512bh bcast_pair(const uint16_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(v));
}

// G groups (gb bytes apart) at once: G·R independent chains, so that a token or two still hide the instruction's
// latency (each chain's instructions are those of G = 1, in the same order).
template <int R, int G>
void gemm_bf16_dp_x16_rg(const uint8_t* g, size_t gb, int64_t n, const uint16_t* x, int64_t xs, float* y, int64_t ys) {
  __m512 acc[G][R];
  for (int j = 0; j < G; ++j)
    for (int t = 0; t < R; ++t) acc[j][t] = _mm512_setzero_ps();
  const int64_t pairs = (n + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh w[G];
    for (int j = 0; j < G; ++j) {
      prefetch_span(g + j * gb + p * 64, 64);
      w[j] = reinterpret_cast<__m512bh>(_mm512_rol_epi32(_mm512_loadu_si512(g + j * gb + p * 64), 16));
    }
    for (int t = 0; t < R; ++t) {
      const __m512bh xp = bcast_pair(x + t * xs + 2 * p);
      for (int j = 0; j < G; ++j) acc[j][t] = _mm512_dpbf16_ps(acc[j][t], w[j], xp);
    }
  }
  for (int j = 0; j < G; ++j)
    for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys + 16 * j, acc[j][t]);
}
template <int R>
void gemm_bf16_dp_x16_r(const uint8_t* g, int64_t n, const uint16_t* x, int64_t xs, float* y, int64_t ys) {
  gemm_bf16_dp_x16_rg<R, 1>(g, 0, n, x, xs, y, ys);
}

// Prefetches, kAhead bytes on, the half of block b's pair record (kRecord bytes: both blocks' quants, then their
// scales) that belongs before block b: the first whole lines of it for an even b, the rest for an odd one. Before
// each block rather than the whole record before the first: the 32-element kernels from 2 tokens on, and the 4- and
// 5-bit ones at batch 1 too (times against the burst in the kernels' comments).
template <int64_t kAhead, int64_t kRecord>
inline void prefetch_pair_half(const uint8_t* g, int64_t b) {
  constexpr int64_t kFirst = kRecord / 128 * 64;
  prefetch_span_ahead<kAhead>(g + (b / 2) * kRecord + (b % 2) * kFirst, b % 2 ? kRecord - kFirst : kFirst);
}

// One block's integer sum for one token, starting from zero: the −128·Σx correction is subtracted after the chain
// (the sum is exact in int32 in any order), so the chain's first vpdpbusd does not wait on the token's Σx.
inline __m512i q8_0_block_sum(const uint8_t* qs, const int8_t* xq, int32_t x_sum) {
  __m512i s = _mm512_setzero_si512();
  for (int k = 0; k < 8; ++k) s = _mm512_dpbusd_epi32(s, _mm512_load_si512(qs + 64 * k), bcast4(xq + 4 * k));
  return _mm512_sub_epi32(s, _mm512_slli_epi32(_mm512_set1_epi32(x_sum), 7));
}

// Batch 1 (decode), where the kernel only has to keep up with memory: a pair record's bytes in address order (the
// two blocks' weights, then their shared line of scales), and no chain waiting on a scalar load, so it streams as fast
// as a bare read of the same bytes, faster than the R-token loop below at R = 1; the result is the same bit for bit
// (integer sums, then the same FMAs in the same order). No software prefetch: the hardware prefetcher keeps up with
// Q8_0's bytes alone, and a prefetch slows it. The R-token loop below and the Q4_0 family's keep the correction at the
// chain's start: moving it gains nothing there. (bench_matmul_packed --types q8_0 --tokens 1; `kvik bench` decode.)
inline void gemm_q8_0_x16_1(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y) {
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* rec = g + packed_qs_offset(b, kQ8_0PackedQs);
    const __m512i s0 = q8_0_block_sum(rec, x.qs + b * kQK8_0, x.sums[b]);
    const __m512i s1 = q8_0_block_sum(rec + kQ8_0PackedQs, x.qs + (b + 1) * kQK8_0, x.sums[b + 1]);
    const __m512i d = load512(g + packed_d_offset(b, kQ8_0PackedQs));  // both blocks' 16 scales
    const __m512 dw0 = _mm512_cvtph_ps(_mm512_castsi512_si256(d)),
                 dw1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(d, 1));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dw0, _mm512_set1_ps(x.d[b])), acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(dw1, _mm512_set1_ps(x.d[b + 1])), acc);
  }
  if (b < nb) {  // an odd last block
    const __m512i s = q8_0_block_sum(g + packed_qs_offset(b, kQ8_0PackedQs), x.qs + b * kQK8_0, x.sums[b]);
    const __m512 dw = _mm512_cvtph_ps(load256(g + packed_d_offset(b, kQ8_0PackedQs)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[b])), acc);
  }
  _mm512_storeu_ps(y, acc);
}

template <int R>
void gemm_q8_0_x16_r(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y, int64_t ys) {
  if constexpr (R == 1) return gemm_q8_0_x16_1(g, nb, x, y);
  __m512 acc[R];
  for (int t = 0; t < R; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i w[8];
    const uint8_t* qs = g + packed_qs_offset(b, kQ8_0PackedQs);
    // (Batch 1 is gemm_q8_0_x16_1, without software prefetch.) Half a record a block, which is faster at 2-16 tokens
    // than the whole record before the first block (bench_matmul_packed --types q8_0).
    prefetch_pair_half<kPrefetchAhead, 2 * kQ8_0PackedQs + kPairScales>(g, b);
    for (int k = 0; k < 8; ++k) w[k] = _mm512_load_si512(qs + 64 * k);
    const __m512 dw = _mm512_cvtph_ps(load256(g + packed_d_offset(b, kQ8_0PackedQs)));
    for (int t = 0; t < R; ++t) {
      const int8_t* xq = x.qs + (t * nb + b) * kQK8_0;
      // From 3 tokens on, two chains of vpdpbusd (even and odd k): one chain of 8 waits on the instruction's latency;
      // at 1-2 tokens the other tokens' chains hide it and one chain is faster (bench_matmul_packed --types q8_0).
      __m512i s = _mm512_set1_epi32(-128 * x.sums[t * nb + b]);
      if constexpr (R > 2) {
        __m512i s1 = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
          s = _mm512_dpbusd_epi32(s, w[k], bcast4(xq + 4 * k));
          s1 = _mm512_dpbusd_epi32(s1, w[k + 1], bcast4(xq + 4 * k + 4));
        }
        s = _mm512_add_epi32(s, s1);
      } else {
        for (int k = 0; k < 8; ++k) s = _mm512_dpbusd_epi32(s, w[k], bcast4(xq + 4 * k));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[t * nb + b])), acc[t]);
    }
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
}

// Q5_0's / Q5_K's fifth bits of nibble vector v (fb: bit v of a byte = the low element's, bit 4 + v = the high
// one's) or-ed in at bit 4 of lo / hi (epi16 shifts: the strays are masked off).
inline void or_fifth_bits(__m512i& lo, __m512i& hi, __m512i fb, int v) {
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(fb, 4 - v), bit4));
  hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi16(fb, v), bit4));
}

// How far ahead the 4- to 6-bit kernels prefetch their records for R tokens: at batch 1 (decode), 8 KiB, the distance
// that decodes fastest (4 and 16 KiB, and no software prefetch, are slower; `kvik bench` decode on a Q4_K_M model,
// bench_matmul_packed --types q4_0 --tokens 1).
template <int R>
inline constexpr int64_t kPrefetchAheadFor = R == 1 ? 8192 : kPrefetchAhead;

// The K-quant kernels' prefetch of the record kPrefetchAheadFor<R> bytes on, spread: one eighth of it before each of
// the record's 8 sub-blocks / chunks, not all its 36-53 lines before the first (which stalls the core on its
// outstanding misses as the attention's burst did); faster in decode, batched decode and prefill alike (`kvik bench`
// on a Q4_K_M model).
template <int R, int64_t kRecord>
inline void prefetch_record_part(const uint8_t* rec, int part) {
  constexpr int64_t kPart = (kRecord / 8 + 63) / 64 * 64;  // whole lines
  prefetch_span_ahead<kPrefetchAheadFor<R>>(rec + part * kPart, part == 7 ? kRecord - 7 * kPart : kPart);
}

// Q4_0, IQ4_NL (kCodebook: each nibble looked up as kIQ4NLValues + 128 by vpshufb, offset 128 instead of 8),
// Q5_0 (kFifth: the fifth bits or-ed in at bit 4 as Q5_K's, offset 16) and Q4_1 / Q5_1 (kMin: no offset; after
// the d term a second fma adds the rows' mins times the token's d_x·Σx).
template <int R, bool kCodebook, bool kFifth = false, bool kMin = false>
void gemm_q4_0_x16_r(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y, int64_t ys) {
  constexpr int64_t Q = kFifth ? kQ5_0PackedQs : kQ4_0PackedQs, S = kMin ? kMinPairScales : kPairScales;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i book = _mm512_add_epi8(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues))), _mm512_set1_epi8(-128));
  constexpr int32_t kOffset = kMin ? 0 : kCodebook ? 128 : kFifth ? 16 : 8;
  __m512 acc[R];
  for (int t = 0; t < R; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i lo[4], hi[4];
    const uint8_t* qs = g + packed_qs_offset(b, Q, S);
    // Unlike Q8_0's, these want the software prefetch at batch 1 too (they do more work per byte, and are much slower
    // without it). Half a record a block, which is no slower than the whole record before the first block at any
    // token count and faster at 1-8 (bench_matmul_packed --types q4_0,iq4_nl,q5_0).
    prefetch_pair_half<kPrefetchAheadFor<R>, 2 * Q + S>(g, b);
    __m512i fb = _mm512_setzero_si512();
    if constexpr (kFifth) fb = _mm512_load_si512(qs + kQ4_0PackedQs);
    for (int v = 0; v < 4; ++v) {
      const __m512i raw = _mm512_load_si512(qs + 64 * v);
      lo[v] = _mm512_and_si512(raw, m4), hi[v] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      if constexpr (kCodebook) lo[v] = _mm512_shuffle_epi8(book, lo[v]), hi[v] = _mm512_shuffle_epi8(book, hi[v]);
      if constexpr (kFifth) or_fifth_bits(lo[v], hi[v], fb, v);
    }
    const __m512 dw = _mm512_cvtph_ps(load256(g + packed_d_offset(b, Q, S)));
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kMin) mw = _mm512_cvtph_ps(load256(g + packed_m_offset(b, Q)));
    for (int t = 0; t < R; ++t) {
      const int8_t* xq = x.qs + (t * nb + b) * kQK8_0;
      __m512i s = _mm512_set1_epi32(-kOffset * x.sums[t * nb + b]), s1 = _mm512_setzero_si512();
      for (int v = 0; v < 4; ++v) {  // two chains, as Q8_0's
        s = _mm512_dpbusd_epi32(s, lo[v], bcast4(xq + 4 * v));
        s1 = _mm512_dpbusd_epi32(s1, hi[v], bcast4(xq + 16 + 4 * v));
      }
      s = _mm512_add_epi32(s, s1);
      const float dx = x.d[t * nb + b];
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[t]);
      if constexpr (kMin)
        acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(dx * static_cast<float>(x.sums[t * nb + b])), acc[t]);
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
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int t = 0; t < R; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = g + b * L.record;
    __m512i isum[R];
    for (int t = 0; t < R; ++t) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      __m512i lo[4], hi[4];
      __m512i fb = _mm512_setzero_si512();
      prefetch_record_part<R, L.record>(rec, j);
      if constexpr (kFifth) fb = _mm512_load_si512(rec + L.fifth + 64 * j);
      for (int v = 0; v < 4; ++v) {
        const __m512i raw = _mm512_load_si512(rec + j * 256 + 64 * v);
        lo[v] = _mm512_and_si512(raw, m4), hi[v] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        if constexpr (kFifth) or_fifth_bits(lo[v], hi[v], fb, v);
      }
      const __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + L.sc + 16 * j)));
      for (int t = 0; t < R; ++t) {
        const int8_t* xq = x.x[t * nb + b].qs + 32 * j;
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], bcast4(xq));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], bcast4(xq + 16));
        for (int v = 1; v < 4; ++v) {  // two chains, as Q8_0's
          s = _mm512_dpbusd_epi32(s, lo[v], bcast4(xq + 4 * v));
          s1 = _mm512_dpbusd_epi32(s1, hi[v], bcast4(xq + 16 + 4 * v));
        }
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(s, s1), sc));
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
      prefetch_record_part<R, kQ6KRecord>(rec, c);
      // In address order: the scale line (before each chunk pair), the nibbles, the high bits.
      const __m512i pair = _mm512_cvtepi8_epi16(load256(rec + q6_k_sc_offset(c)));  // (sc_2c, sc_2c+1) per row
      const uint8_t* ch = rec + q6_k_chunk_offset(c);
      __m512i raw[4];
      for (int v = 0; v < 4; ++v) raw[v] = _mm512_load_si512(ch + 64 * v);
      const __m512i hl = _mm512_load_si512(ch + 256), hh = _mm512_load_si512(ch + 320);
      __m512i lo[4], hi[4];
      for (int v = 0; v < 4; ++v) {
        lo[v] = _mm512_or_si512(_mm512_and_si512(raw[v], m4), q6_high_bits(hl, v));
        hi[v] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw[v], 4), m4), q6_high_bits(hh, v));
      }
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
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, _mm512_set1_ps(x.x[t * nb + b].d)), acc[t]);
  }
  for (int t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
}

template <int R>
struct F32x16 {
  static constexpr auto run = gemm_f32_x16_r<R>;
};
template <int R>
struct F16x16 {
  static constexpr auto run = gemm_half_x16_r<R, true>;
};
template <int R>
struct BF16x16 {
  static constexpr auto run = gemm_half_x16_r<R, false>;
};
template <int R>
struct BF16DPx16 {
  static constexpr auto run = gemm_bf16_dp_x16_r<R>;
};
template <int R>
struct Q8_0x16 {
  static constexpr auto run = gemm_q8_0_x16_r<R>;
};
template <int R>
struct Q4_0x16 {
  static constexpr auto run = gemm_q4_0_x16_r<R, false>;
};
template <int R>
struct IQ4_NLx16 {
  static constexpr auto run = gemm_q4_0_x16_r<R, true>;
};
template <int R>
struct Q5_0x16 {
  static constexpr auto run = gemm_q4_0_x16_r<R, false, true>;
};
template <int R>
struct Q4_1x16 {
  static constexpr auto run = gemm_q4_0_x16_r<R, false, false, true>;
};
template <int R>
struct Q5_1x16 {
  static constexpr auto run = gemm_q4_0_x16_r<R, false, true, true>;
};
template <int R>
struct Q4_Kx16 {
  static constexpr auto run = gemm_k_scale_min_x16_r<R, false>;
};
template <int R>
struct Q5_Kx16 {
  static constexpr auto run = gemm_k_scale_min_x16_r<R, true>;
};
template <int R>
struct Q6_Kx16 {
  static constexpr auto run = gemm_q6_k_x16_r<R>;
};
void gemm_f32_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  by_tokens<F32x16>(R, g, n, x, xs, y, ys);
}
void gemm_f16_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  by_tokens<F16x16>(R, g, n, x, xs, y, ys);
}
// Few tokens, several groups a pass: 1 or 2 tokens × 4 groups, 3 or 4 tokens × 2 groups (4 to 8 chains), each pass
// pass(R, groups, j) over groups j.. with R and groups as std::integral_constant; the groups left over, and every
// group for more tokens, one at a time: one(j), R chains.
template <class Pass, class One>
void in_group_passes(int64_t R, int64_t G, Pass&& pass, One&& one) {
  using std::integral_constant;
  int64_t j = 0;
  auto passes = [&](auto r, auto groups) {
    for (; j + groups <= G; j += groups) pass(r, groups, j);
  };
  if (R == 1)
    passes(integral_constant<int, 1>{}, integral_constant<int, 4>{});
  else if (R == 2)
    passes(integral_constant<int, 2>{}, integral_constant<int, 4>{});
  else if (R == 3)
    passes(integral_constant<int, 3>{}, integral_constant<int, 2>{});
  else if (R == 4)
    passes(integral_constant<int, 4>{}, integral_constant<int, 2>{});
  for (; j < G; ++j) one(j);
}
void gemm_bf16_x16(const uint8_t* g, int64_t G, size_t gb, int64_t n, const float* x, int64_t xs, int64_t R, float* y,
                   int64_t ys) {
  in_group_passes(
      R, G,
      [&](auto r, auto groups, int64_t j) {
        gemm_bf16_x16_rg<decltype(r)::value, decltype(groups)::value>(g + j * gb, gb, n, x, xs, y + 16 * j, ys);
      },
      [&](int64_t j) { by_tokens<BF16x16>(R, g + j * gb, n, x, xs, y + 16 * j, ys); });
}
void gemm_bf16_dp_x16(const uint8_t* g, int64_t G, size_t gb, int64_t n, const uint16_t* x, int64_t xs, int64_t R,
                      float* y, int64_t ys) {
  in_group_passes(
      R, G,
      [&](auto r, auto groups, int64_t j) {
        gemm_bf16_dp_x16_rg<decltype(r)::value, decltype(groups)::value>(g + j * gb, gb, n, x, xs, y + 16 * j, ys);
      },
      [&](int64_t j) { by_tokens<BF16DPx16>(R, g + j * gb, n, x, xs, y + 16 * j, ys); });
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
void gemm_q5_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q5_0x16>(R, g, nb, x, y, ys);
}
void gemm_q4_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q4_1x16>(R, g, nb, x, y, ys);
}
void gemm_q5_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  by_tokens<Q5_1x16>(R, g, nb, x, y, ys);
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

}  // namespace kvik::avx512
