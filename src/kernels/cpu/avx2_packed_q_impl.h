// The AVX2 kernels on repacked 32-element-block weights (packed.h: Q8_0, Q4_0, IQ4_NL, Q5_0, Q4_1, Q5_1), with and
// without AVX-VNNI. Include only from the translation units that build them (isa_avx2_packed_q.cpp with the AVX2 flags,
// isa_avx_vnni.cpp with AVX-VNNI as well): everything here is in an unnamed namespace, so each gets its own copy
// compiled for its own instructions.
//
// A 256-bit vector holds 8 of a group's 16 rows (two halves) of one 4-byte k-group.
// - With AVX-VNNI (Intel Alder Lake and later clients, Sierra Forest; AMD Zen 5) vpdpbusd multiplies the stored u8
//   quants by the activation's 4 bytes broadcast into s32 as the AVX-512 kernels do; the offset comes off with the
//   block's Σx.
// - Without it vpmaddubsw multiplies u8 by s8 and adds pairs into s16 with saturation, then vpmaddwd by 1 widens
//   pairs of those into s32:
//   - Q8_0 and IQ4_NL weights are signed (Q8_0's stored q + 128 flipped back by xor; IQ4_NL's codebook looked up
//     signed): |w| meets x with w's sign moved onto it (vpsignb), so each product is |w|·(±x) ≤ 128·127 and a pair
//     fits s16 exactly (x is a quantize_row_q8_0 value, |x| ≤ 127);
//   - Q4_0, Q4_1 (w ≤ 15) and Q5_0, Q5_1 (w ≤ 31) are unsigned: vpmaddubsw directly; a pair is ≤ 3810 (7874), so
//     eight (four) of them are added in s16 before one vpmaddwd; the offset comes off with the block's Σx.
// The integer sums are exact and the float epilogue is the reference's fmas in its order, so every result equals
// gemm_*_x16_ref bit for bit and no token's result depends on how many tokens share the call.
//
// Q8_0 without VNNI is bound by its instruction sequence, not by memory: per 64 multiply-adds (a k-group of 16 rows,
// one token) 2 vpsignb + 2 vpmaddubsw + 2 vpmaddwd + 2 vpaddd (a vpmaddubsw pair of signed products reaches 2·127·127,
// so two cannot share s16; splitting the weights into nibbles to let them would take 2 vpmaddubsw per 32 bytes and
// more). Every exact formulation needs 4 vector uops per 32 multiply-adds (the quants as s16 words against vpmaddwd;
// w's sign onto x by vpxor with a per-block correction), and the sequence is bound by the uops a core issues more than
// by its two multiply pipes, so none of them is faster: bench_avx2_int8_ceiling runs each sequence alone,
// bench_matmul_packed the kernel. At batch 1 a pair record is read scale line first (the AVX-512 kernel's weights,
// weights, scale line order is no faster here).
#pragma once

#include <immintrin.h>

#include "kernels/cpu/avx2_int8.h"
#include "kernels/cpu/packed.h"
#include "tensor/dtype.h"

namespace kvik::avx2 {
namespace {  // NOLINT(google-build-namespaces): one copy per ISA translation unit, see above

enum class Q { kQ8_0, kQ4_0, kIQ4_NL, kQ5_0, kQ4_1, kQ5_1 };

template <Q T, bool kVnni>
struct Layout {
  // Signed quants through the vpsignb trick (without VNNI; with it every type is u8 · s8 as stored).
  static constexpr bool kSigned = !kVnni && (T == Q::kQ8_0 || T == Q::kIQ4_NL);
  static constexpr bool kFifth = T == Q::kQ5_0 || T == Q::kQ5_1;
  static constexpr bool kMin = T == Q::kQ4_1 || T == Q::kQ5_1;
  static constexpr int64_t kQs = T == Q::kQ8_0 ? kQ8_0PackedQs : kFifth ? kQ5_0PackedQs : kQ4_0PackedQs;
  static constexpr int64_t kS = kMin ? kMinPairScales : kPairScales;
  // The reference's offsets of the stored u8 quants (Q8_0 q + 128, IQ4_NL codebook + 128); none for signed quants.
  static constexpr int32_t kOffset = T == Q::kQ4_0                                    ? 8
                                     : T == Q::kQ5_0                                  ? 16
                                     : !kSigned && (T == Q::kQ8_0 || T == Q::kIQ4_NL) ? 128
                                                                                      : 0;
  static constexpr int kS16Terms = kFifth ? 4 : 8;  // unsigned products added in s16 before widening
};

// Σ over 4-byte groups of s8 w times s8 x (|x| ≤ 127), as 8 s32 lanes, exact.
inline __m256i dot_signed(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

// s0 += dot_signed(w0, x), s1 += dot_signed(w1, x) for x = the 4 bytes at xp in every lane, |w| = aw given. One
// asm block: GCC would otherwise hoist the broadcasts of all R tokens ahead of their products, each a live register,
// and then keep half the sums on the stack in the k loop (a store and a reload each per k-group).
inline void dot_signed_acc2(__m256i& s0, __m256i& s1, const int8_t* xp, __m256i w0, __m256i aw0, __m256i w1,
                            __m256i aw1, __m256i ones) {
  __m256i x, p;
  asm("vpbroadcastd %[xp], %[x]\n\t"
      "vpsignb %[w0], %[x], %[p]\n\t"
      "vpsignb %[w1], %[x], %[x]\n\t"
      "vpmaddubsw %[p], %[aw0], %[p]\n\t"
      "vpmaddubsw %[x], %[aw1], %[x]\n\t"
      "vpmaddwd %[ones], %[p], %[p]\n\t"
      "vpmaddwd %[ones], %[x], %[x]\n\t"
      "vpaddd %[p], %[s0], %[s0]\n\t"
      "vpaddd %[x], %[s1], %[s1]"
      : [s0] "+x"(s0), [s1] "+x"(s1), [x] "=&x"(x), [p] "=&x"(p)
      : [xp] "m"(*reinterpret_cast<const int32_t*>(xp)), [w0] "x"(w0), [aw0] "x"(aw0), [w1] "x"(w1), [aw1] "x"(aw1),
        [ones] "x"(ones));
}

// p += lo · (the 4 bytes at xl in every lane) + hi · (those at xh), as s16 pairs, for u8 quants lo, hi. One asm block
// for the reason dot_signed_acc2 has one: GCC would compute all R tokens' products of a half first and add them up as
// a tree, with most of them on the stack.
inline void unsigned_pair_acc(__m256i& p, const int8_t* xl, const int8_t* xh, __m256i lo, __m256i hi) {
  __m256i a, b;
  asm("vpbroadcastd %[xl], %[a]\n\t"
      "vpbroadcastd %[xh], %[b]\n\t"
      "vpmaddubsw %[a], %[lo], %[a]\n\t"
      "vpmaddubsw %[b], %[hi], %[b]\n\t"
      "vpaddw %[a], %[p], %[p]\n\t"
      "vpaddw %[b], %[p], %[p]"
      : [p] "+x"(p), [a] "=&x"(a), [b] "=&x"(b)
      : [xl] "m"(*reinterpret_cast<const int32_t*>(xl)), [xh] "m"(*reinterpret_cast<const int32_t*>(xh)), [lo] "x"(lo),
        [hi] "x"(hi));
}

// Half h (rows 8h .. 8h + 7) of nibble vector v of a Q4_0-layout block: its low and high quants as u8 (IQ4_NL: the
// signed codebook values), Q5's fifth bits or-ed in at bit 4 (fb: bit v of a byte = the low element's, 4 + v = the
// high one's; epi16 shifts, strays masked off).
template <Q T, bool kVnni>
inline void nibble_quants(const uint8_t* qs, int v, int h, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i raw = load32(qs + 64 * v + 32 * h);
  lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
  if constexpr (T == Q::kIQ4_NL) {
    __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    if constexpr (kVnni) book = _mm256_add_epi8(book, _mm256_set1_epi8(-128));  // the u8 codebook + 128
    lo = _mm256_shuffle_epi8(book, lo), hi = _mm256_shuffle_epi8(book, hi);
  }
  if constexpr (Layout<T, kVnni>::kFifth) {
    const __m256i fb = load32(qs + kQ4_0PackedQs + 32 * h), bit4 = _mm256_set1_epi8(0x10);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(fb, 4 - v), bit4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(fb, v), bit4));
  }
}

// Half h's exact integer sums Σ_j w·x − offset·Σx of R tokens for the 4- and 5-bit types without VNNI: s[t].
template <Q T, int R>
inline void half_sums(const uint8_t* qs, int h, const int8_t* const* xq, const int32_t* xsum, __m256i (&s)[R]) {
  using L = Layout<T, false>;
  __m256i p[R];
  for (int t = 0; t < R; ++t) s[t] = _mm256_set1_epi32(-L::kOffset * xsum[t]), p[t] = _mm256_setzero_si256();
  for (int v = 0; v < 4; ++v) {
    __m256i lo, hi;
    nibble_quants<T, false>(qs, v, h, lo, hi);
    for (int t = 0; t < R; ++t) {
      if constexpr (L::kSigned) {
        const __m256i xl = bcast4(xq[t] + 4 * v), xh = bcast4(xq[t] + 16 + 4 * v);
        s[t] = _mm256_add_epi32(s[t], _mm256_add_epi32(dot_signed(lo, xl), dot_signed(hi, xh)));
      } else {
        unsigned_pair_acc(p[t], xq[t] + 4 * v, xq[t] + 16 + 4 * v, lo, hi);
      }
    }
    if constexpr (!L::kSigned)
      if ((2 * (v + 1)) % L::kS16Terms == 0)
        for (int t = 0; t < R; ++t) {
          s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p[t], _mm256_set1_epi16(1)));
          p[t] = _mm256_setzero_si256();
        }
  }
}

// The block's exact integer sums Σ_j w·x − offset·Σx of R tokens (x rows xq[t]) for both halves: s[t][h].
// next (Q8_0 without VNNI): the block pair to prefetch, parts part .. part + 7 of 16 (one per k-group), or nullptr.
template <Q T, int R, bool kVnni>
inline void block_sums(const uint8_t* qs, const int8_t* const* xq, const int32_t* xsum, __m256i (&s)[R][2],
                       const uint8_t* next, int part) {
  using L = Layout<T, kVnni>;
  for (int t = 0; t < R; ++t) s[t][0] = s[t][1] = _mm256_set1_epi32(-L::kOffset * xsum[t]);
  if constexpr (kVnni && T == Q::kQ8_0) {
    for (int k = 0; k < 8; ++k) {
      const __m256i w0 = load32(qs + 64 * k), w1 = load32(qs + 64 * k + 32);
      for (int t = 0; t < R; ++t) {
        const __m256i x = bcast4(xq[t] + 4 * k);
        s[t][0] = dpbusd(s[t][0], w0, x), s[t][1] = dpbusd(s[t][1], w1, x);
      }
    }
  } else if constexpr (kVnni) {
    for (int h = 0; h < 2; ++h)
      for (int v = 0; v < 4; ++v) {
        __m256i lo, hi;
        nibble_quants<T, kVnni>(qs, v, h, lo, hi);
        for (int t = 0; t < R; ++t)
          s[t][h] = dpbusd(dpbusd(s[t][h], lo, bcast4(xq[t] + 4 * v)), hi, bcast4(xq[t] + 16 + 4 * v));
      }
  } else if constexpr (T == Q::kQ8_0) {
    for (int k = 0; k < 8; ++k) {
      if (next) prefetch_part<2 * L::kQs + L::kS, 16>(next, part + k);
      const __m256i flip = _mm256_set1_epi8(-128);
      const __m256i w0 = _mm256_xor_si256(load32(qs + 64 * k), flip),
                    w1 = _mm256_xor_si256(load32(qs + 64 * k + 32), flip);
      const __m256i aw0 = _mm256_abs_epi8(w0), aw1 = _mm256_abs_epi8(w1), ones = _mm256_set1_epi16(1);
      for (int t = 0; t < R; ++t) dot_signed_acc2(s[t][0], s[t][1], xq[t] + 4 * k, w0, aw0, w1, aw1, ones);
    }
  } else {
    __m256i sh[R];
    for (int h = 0; h < 2; ++h) {
      half_sums<T, R>(qs, h, xq, xsum, sh);
      for (int t = 0; t < R; ++t) s[t][h] = sh[t];
    }
  }
}

// Block b's float epilogue, as the reference: half h's scales (and mins) of the 8 rows, then per token
// acc + float(s) · (d_w · d_x) (+ m_w · (d_x · Σx) for the types with a min).
template <Q T>
inline void half_scales(const uint8_t* g, int64_t b, int h, __m256& dw, __m256& mw) {
  using L = Layout<T, false>;  // the offsets do not depend on VNNI
  dw = _mm256_cvtph_ps(load16(g + packed_d_offset(b, L::kQs, L::kS) + 16 * h));
  mw = _mm256_setzero_ps();
  if constexpr (L::kMin) mw = _mm256_cvtph_ps(load16(g + packed_m_offset(b, L::kQs) + 16 * h));
}
template <Q T>
inline __m256 block_fma(__m256 acc, __m256i s, __m256 dw, __m256 mw, float dx, int32_t xsum) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc);
  if constexpr (Layout<T, false>::kMin) acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(dx * static_cast<float>(xsum)), acc);
  return acc;
}

// The 4- and 5-bit types without VNNI for 3-4 tokens, one half (8 rows) at a time over all blocks: the R tokens' 8
// float sums, their integer sums and the half's quants then fit the 16 ymm registers, where both halves at once keep
// some on the stack. With 1-2 tokens both halves at once fit and are faster; from 3 tokens on the halves win
// (bench_matmul_packed --types q4_0,q4_1,q5_0,q5_1,iq4_nl). Per output the integer sums are the same and the float
// epilogue is the same fmas in the same block order, so the results are too.
constexpr int kHalvesMinTokens = 3;

template <Q T, int R>
void gemm_r_halves(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y, int64_t ys) {
  using L = Layout<T, false>;
  for (int h = 0; h < 2; ++h) {
    __m256 acc[R];
    for (int t = 0; t < R; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* xq[R];
      int32_t xsum[R];
      for (int t = 0; t < R; ++t) xq[t] = x.qs + (t * nb + b) * kQK8_0, xsum[t] = x.sums[t * nb + b];
      __m256i s[R];
      half_sums<T, R>(g + packed_qs_offset(b, L::kQs, L::kS), h, xq, xsum, s);
      __m256 dw, mw;
      half_scales<T>(g, b, h, dw, mw);
      for (int t = 0; t < R; ++t) acc[t] = block_fma<T>(acc[t], s[t], dw, mw, x.d[t * nb + b], xsum[t]);
    }
    for (int t = 0; t < R; ++t) _mm256_storeu_ps(y + t * ys + 8 * h, acc[t]);
  }
}

// R ≤ 4 tokens (x rows 0..R−1) over one 16-row group: y[t·ys + i].
template <Q T, int R, bool kVnni>
void gemm_r(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y, int64_t ys) {
  using L = Layout<T, kVnni>;
  __m256 acc[R][2];
  for (int t = 0; t < R; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* xq[R];
    int32_t xsum[R];
    for (int t = 0; t < R; ++t) xq[t] = x.qs + (t * nb + b) * kQK8_0, xsum[t] = x.sums[t * nb + b];
    __m256i s[R][2];
    // Batch 1 without VNNI (avx2_int8.h says why): Q8_0 prefetches the pair kQ8_0PairsAhead ahead, half
    // of it per block spread over its k-groups; the others the bytes 1024 ahead of the pair, all at its start.
    const uint8_t* next = nullptr;
    if constexpr (!kVnni && R == 1 && T == Q::kQ8_0)
      next = g + packed_qs_offset(b - b % 2 + 2 * kQ8_0PairsAhead, L::kQs, L::kS);
    else if (!kVnni && R == 1 && b % 2 == 0)
      prefetch_ahead(g + packed_qs_offset(b, L::kQs, L::kS), 2 * L::kQs + L::kS);
    block_sums<T, R, kVnni>(g + packed_qs_offset(b, L::kQs, L::kS), xq, xsum, s, next, 8 * static_cast<int>(b % 2));
    for (int h = 0; h < 2; ++h) {
      __m256 dw, mw;
      half_scales<T>(g, b, h, dw, mw);
      for (int t = 0; t < R; ++t) acc[t][h] = block_fma<T>(acc[t][h], s[t][h], dw, mw, x.d[t * nb + b], xsum[t]);
    }
  }
  for (int t = 0; t < R; ++t) _mm256_storeu_ps(y + t * ys, acc[t][0]), _mm256_storeu_ps(y + t * ys + 8, acc[t][1]);
}

template <Q T, bool kVnni>
struct GemmQ {
  template <int R>
  static void run(const uint8_t* g, int64_t nb, const ActQ8S& x, float* y, int64_t ys) {
    if constexpr (!kVnni && T != Q::kQ8_0 && R >= kHalvesMinTokens)
      gemm_r_halves<T, R>(g, nb, x, y, ys);
    else
      gemm_r<T, R, kVnni>(g, nb, x, y, ys);
  }
};
template <Q T, bool kVnni>
void gemm_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  by_fours<GemmQ<T, kVnni>>(g, nb, x, R, y, ys);
}

}  // namespace
}  // namespace kvik::avx2
