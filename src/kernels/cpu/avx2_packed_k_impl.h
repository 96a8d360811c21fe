// The AVX2 kernels on repacked K-quant weights (packed.h: Q4_K, Q5_K, Q6_K) against Q8_K activations, with and
// without AVX-VNNI; included only by isa_avx2_packed_k.cpp and isa_avx_vnni.cpp, each getting its own copy (unnamed
// namespace) compiled for its own instructions. As in avx2_packed_q_impl.h a 256-bit vector holds 8 of a group's 16
// rows (two halves, done one after the other).
// - With AVX-VNNI each sub-block's products go into s32 by vpdpbusd and are multiplied by its scale (vpmulld).
// - Without it vpmaddubsw multiplies the unsigned quants by the activation's 4 bytes broadcast: Q4_K (quants ≤ 15)
//   adds a sub-block's 8 products vectors in s16 (≤ 8·3810), Q5_K (≤ 31) four at a time, Q6_K (≤ 63) two at a
//   time; vpmaddwd then widens them multiplied by the sub-block's scale (each row's scale twice in its 32-bit lane).
// Either way the sums are the reference's sc·Σw·x, exact; the Q4_K / Q5_K min term Σ_j m_j·Σx_j and Q6_K's
// −32·Σ sc·bsums come from vpmaddwd over sub-block pairs, and the float epilogue is gemm_*_k_x16_ref's fmas in its
// order: every result equals the reference bit for bit.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/avx2_int8.h"
#include "kernels/cpu/packed.h"

namespace kvik::avx2 {
namespace {  // NOLINT(google-build-namespaces): one copy per ISA translation unit, see above

// Each 32-bit lane's low 16 bits in both halves (a scale for vpmaddwd against two s16 partial sums).
inline __m256i twice16(__m256i v) {
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

// s += Σ_v maddubs(lo[v], x[4v..]) + maddubs(hi[v], x[16 + 4v..]) widened by vpmaddwd against sc every kTerms
// products (8: Q4_K; 4: Q5_K), x = the sub-block's 32 activation bytes at xq. One asm block per token: GCC otherwise
// hoists the broadcasts of all tokens ahead, each a live register beside the 8 weight vectors, and spills the weights
// and the sums inside the loop.
template <int kTerms>
inline void sub_block_acc(__m256i& s, const int8_t* xq, const __m256i (&lo)[4], const __m256i (&hi)[4], __m256i sc) {
  static_assert(kTerms == 8 || kTerms == 4);
  __m256i p, x;
#define KVIK_PRODUCT(OFF, W, OP) "vpbroadcastd " #OFF "(%[xq]), %[x]\n\tvpmaddubsw %[x], %[" #W "], %[x]\n\t" OP
#define KVIK_FIRST(OFF, W) "vpbroadcastd " #OFF "(%[xq]), %[x]\n\tvpmaddubsw %[x], %[" #W "], %[p]\n\t"
#define KVIK_ADD "vpaddw %[x], %[p], %[p]\n\t"
#define KVIK_WIDEN "vpmaddwd %[sc], %[p], %[p]\n\tvpaddd %[p], %[s], %[s]\n\t"
  if constexpr (kTerms == 8) {
    asm(KVIK_FIRST(0, lo0) KVIK_PRODUCT(16, hi0, KVIK_ADD) KVIK_PRODUCT(4, lo1, KVIK_ADD)
            KVIK_PRODUCT(20, hi1, KVIK_ADD) KVIK_PRODUCT(8, lo2, KVIK_ADD) KVIK_PRODUCT(24, hi2, KVIK_ADD)
                KVIK_PRODUCT(12, lo3, KVIK_ADD) KVIK_PRODUCT(28, hi3, KVIK_ADD) KVIK_WIDEN
        : [s] "+x"(s), [p] "=&x"(p), [x] "=&x"(x)
        : [xq] "r"(xq),
          "m"(*reinterpret_cast<const int8_t(*)[32]>(xq)), [lo0] "x"(lo[0]), [lo1] "x"(lo[1]), [lo2] "x"(lo[2]),
          [lo3] "x"(lo[3]), [hi0] "x"(hi[0]), [hi1] "x"(hi[1]), [hi2] "x"(hi[2]), [hi3] "x"(hi[3]), [sc] "x"(sc));
  } else {
    asm(KVIK_FIRST(0, lo0) KVIK_PRODUCT(16, hi0, KVIK_ADD) KVIK_PRODUCT(4, lo1, KVIK_ADD)
            KVIK_PRODUCT(20, hi1, KVIK_ADD) KVIK_WIDEN KVIK_FIRST(8, lo2) KVIK_PRODUCT(24, hi2, KVIK_ADD)
                KVIK_PRODUCT(12, lo3, KVIK_ADD) KVIK_PRODUCT(28, hi3, KVIK_ADD) KVIK_WIDEN
        : [s] "+x"(s), [p] "=&x"(p), [x] "=&x"(x)
        : [xq] "r"(xq),
          "m"(*reinterpret_cast<const int8_t(*)[32]>(xq)), [lo0] "x"(lo[0]), [lo1] "x"(lo[1]), [lo2] "x"(lo[2]),
          [lo3] "x"(lo[3]), [hi0] "x"(hi[0]), [hi1] "x"(hi[1]), [hi2] "x"(hi[2]), [hi3] "x"(hi[3]), [sc] "x"(sc));
  }
#undef KVIK_PRODUCT
#undef KVIK_FIRST
#undef KVIK_ADD
#undef KVIK_WIDEN
}

// Q4_K / Q5_K, half h of a super-block record for R tokens: isum[t] = Σ_j sc_j·Σ w·x and msum[t] = Σ_j m_j·Σx_j.
// next: the record to prefetch, an eighth per sub-block (prefetch_part, avx2_int8.h), or nullptr.
template <int R, bool kFifth, bool kVnni>
inline void k_scale_min_half(const uint8_t* rec, int h, const BlockQ8_K* const* xb, const int16_t* const* s32,
                             __m256i (&isum)[R], __m256i (&msum)[R], const uint8_t* next) {
  constexpr PackedKScaleMin L = kFifth ? kPackedQ5K : kPackedQ4K;
  constexpr int kTerms = kFifth ? 4 : 8;  // products added in s16 before widening
  const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  for (int t = 0; t < R; ++t) isum[t] = msum[t] = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) {
    if (next) prefetch_part<L.record, 8>(next, j);
    __m256i lo[4], hi[4];
    __m256i fb = _mm256_setzero_si256();
    if constexpr (kFifth) fb = load32(rec + L.fifth + 64 * j + 32 * h);
    for (int v = 0; v < 4; ++v) {
      const __m256i raw = load32(rec + j * 256 + 64 * v + 32 * h);
      lo[v] = _mm256_and_si256(raw, m4), hi[v] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kFifth) {
        lo[v] = _mm256_or_si256(lo[v], _mm256_and_si256(_mm256_slli_epi16(fb, 4 - v), bit4));
        hi[v] = _mm256_or_si256(hi[v], _mm256_and_si256(_mm256_srli_epi16(fb, v), bit4));
      }
    }
    const __m256i sc32 =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + L.sc + 16 * j + 8 * h)));
    if constexpr (kVnni) {  // the sub-block's exact s32 sum times its scale
      for (int t = 0; t < R; ++t) {
        const int8_t* xq = xb[t]->qs + 32 * j;
        __m256i p = _mm256_setzero_si256();
        for (int v = 0; v < 4; ++v) p = dpbusd(dpbusd(p, lo[v], bcast4(xq + 4 * v)), hi[v], bcast4(xq + 16 + 4 * v));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(p, sc32));
      }
      continue;
    }
    const __m256i sc = twice16(sc32);
    for (int t = 0; t < R; ++t) sub_block_acc<kTerms>(isum[t], xb[t]->qs + 32 * j, lo, hi, sc);
  }
  for (int p = 0; p < 4; ++p) {  // (m_2p, m_2p+1) per row against the token's (Σx_2p, Σx_2p+1)
    const __m256i m = _mm256_cvtepu8_epi16(load16(rec + L.m + 32 * p + 16 * h));
    for (int t = 0; t < R; ++t) msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(m, bcast4(s32[t] + 2 * p)));
  }
}

template <int R, bool kFifth, bool kVnni>
void gemm_k_scale_min_r(const uint8_t* g, int64_t nb, const ActQ8KS& x, float* y, int64_t ys) {
  constexpr PackedKScaleMin L = kFifth ? kPackedQ5K : kPackedQ4K;
  __m256 acc[R][2];
  for (int t = 0; t < R; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = g + b * L.record;
    const BlockQ8_K* xb[R];
    const int16_t* s32[R];
    for (int t = 0; t < R; ++t) xb[t] = x.x + t * nb + b, s32[t] = x.sums32 + (t * nb + b) * 8;
    for (int h = 0; h < 2; ++h) {
      __m256i isum[R], msum[R];
      // Batch 1 without VNNI: the next record, spread over the first half (avx2_int8.h); one record ahead streams
      // closest to a bare read of the same bytes, two or three ahead and a burst per sub-block do not.
      const uint8_t* next = !kVnni && R == 1 && h == 0 ? rec + L.record : nullptr;
      k_scale_min_half<R, kFifth, kVnni>(rec, h, xb, s32, isum, msum, next);
      const __m256 dw = _mm256_cvtph_ps(load16(rec + L.d + 16 * h)),
                   dmin = _mm256_cvtph_ps(load16(rec + L.dmin + 16 * h));
      for (int t = 0; t < R; ++t) {
        const __m256 dx = _mm256_set1_ps(xb[t]->d);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, dx), acc[t][h]);
        acc[t][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[t]), _mm256_mul_ps(dmin, dx), acc[t][h]);
      }
    }
  }
  for (int t = 0; t < R; ++t) _mm256_storeu_ps(y + t * ys, acc[t][0]), _mm256_storeu_ps(y + t * ys + 8, acc[t][1]);
}

// Q6_K: per 32-element chunk c the nibbles with their high bit pairs at bits 4..5 are sub-blocks 2c (low nibbles)
// and 2c + 1 (high); the −32 offset comes off per chunk with vpmaddwd of the (−32·sc_2c, −32·sc_2c+1) pairs by the
// token's (bsums_2c, bsums_2c+1). The record keeps a scale line before each chunk pair (packed.h), which this kernel
// reads no slower than scales at the record's end at 1 token and faster from 2 tokens on (bench_matmul_packed
// --types q6_k); loading a chunk in address order (nibbles before high bits) is no faster here and is not done.
inline __m256i q6_high_bits(__m256i hb, int v) {  // bits 2v..2v+1 of each byte → bits 4..5 (strays masked off)
  const __m256i m = _mm256_set1_epi8(0x30);
  switch (v) {
    case 0: return _mm256_and_si256(_mm256_slli_epi16(hb, 4), m);
    case 1: return _mm256_and_si256(_mm256_slli_epi16(hb, 2), m);
    case 2: return _mm256_and_si256(hb, m);
    default: return _mm256_and_si256(_mm256_srli_epi16(hb, 2), m);
  }
}

template <int R, bool kVnni>
inline void q6_k_half(const uint8_t* rec, int h, const BlockQ8_K* const* xb, __m256i (&isum)[R], const uint8_t* next) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i dup_lo = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8,
                                          9, 8, 9, 12, 13, 12, 13);
  const __m256i dup_hi = _mm256_add_epi8(dup_lo, _mm256_set1_epi8(2));
  for (int t = 0; t < R; ++t) isum[t] = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    if (next) prefetch_part<kQ6KRecord, 8>(next, c);
    const uint8_t* ch = rec + q6_k_chunk_offset(c);
    const __m256i hl = load32(ch + 256 + 32 * h), hh = load32(ch + 320 + 32 * h);
    __m256i lo[4], hi[4];
    for (int v = 0; v < 4; ++v) {
      const __m256i raw = load32(ch + 64 * v + 32 * h);
      lo[v] = _mm256_or_si256(_mm256_and_si256(raw, m4), q6_high_bits(hl, v));
      hi[v] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), q6_high_bits(hh, v));
    }
    const __m256i pair = _mm256_cvtepi8_epi16(load16(rec + q6_k_sc_offset(c) + 16 * h));  // (sc_2c, sc_2c+1) per row
    const __m256i sc_lo = _mm256_shuffle_epi8(pair, dup_lo), sc_hi = _mm256_shuffle_epi8(pair, dup_hi);
    const __m256i neg32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(pair, 5));
    if constexpr (kVnni) {  // each sub-block's exact s32 sum times its signed scale
      const __m256i sc_lo32 = _mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16), sc_hi32 = _mm256_srai_epi32(pair, 16);
      for (int t = 0; t < R; ++t) {
        const int8_t* xq = xb[t]->qs + 32 * c;
        __m256i sl = _mm256_setzero_si256(), sh = _mm256_setzero_si256();
        for (int v = 0; v < 4; ++v)
          sl = dpbusd(sl, lo[v], bcast4(xq + 4 * v)), sh = dpbusd(sh, hi[v], bcast4(xq + 16 + 4 * v));
        const __m256i s = _mm256_add_epi32(_mm256_mullo_epi32(sl, sc_lo32), _mm256_mullo_epi32(sh, sc_hi32));
        isum[t] =
            _mm256_add_epi32(isum[t], _mm256_add_epi32(s, _mm256_madd_epi16(neg32, bcast4(xb[t]->bsums + 2 * c))));
      }
      continue;
    }
    for (int t = 0; t < R; ++t) {
      const int8_t* xq = xb[t]->qs + 32 * c;
      __m256i s = _mm256_madd_epi16(neg32, bcast4(xb[t]->bsums + 2 * c));
      for (int v = 0; v < 4; v += 2) {  // two products vectors (≤ 2·16002) per widening
        const __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(lo[v], bcast4(xq + 4 * v)),
                                            _mm256_maddubs_epi16(lo[v + 1], bcast4(xq + 4 * v + 4)));
        const __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(hi[v], bcast4(xq + 16 + 4 * v)),
                                            _mm256_maddubs_epi16(hi[v + 1], bcast4(xq + 20 + 4 * v)));
        s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_madd_epi16(pl, sc_lo), _mm256_madd_epi16(ph, sc_hi)));
      }
      isum[t] = _mm256_add_epi32(isum[t], s);
    }
  }
}

template <int R, bool kVnni>
void gemm_q6_k_r(const uint8_t* g, int64_t nb, const ActQ8KS& x, float* y, int64_t ys) {
  __m256 acc[R][2];
  for (int t = 0; t < R; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = g + b * kQ6KRecord;
    const BlockQ8_K* xb[R];
    for (int t = 0; t < R; ++t) xb[t] = x.x + t * nb + b;
    for (int h = 0; h < 2; ++h) {
      __m256i isum[R];
      const uint8_t* next = !kVnni && R == 1 && h == 0 ? rec + kQ6KRecord : nullptr;  // as gemm_k_scale_min_r
      q6_k_half<R, kVnni>(rec, h, xb, isum, next);
      const __m256 dw = _mm256_cvtph_ps(load16(rec + kQ6KD + 16 * h));
      for (int t = 0; t < R; ++t)
        acc[t][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, _mm256_set1_ps(xb[t]->d)), acc[t][h]);
    }
  }
  for (int t = 0; t < R; ++t) _mm256_storeu_ps(y + t * ys, acc[t][0]), _mm256_storeu_ps(y + t * ys + 8, acc[t][1]);
}

template <bool kFifth, bool kVnni>
struct KScaleMin {
  template <int R>
  static void run(const uint8_t* g, int64_t nb, const ActQ8KS& x, float* y, int64_t ys) {
    gemm_k_scale_min_r<R, kFifth, kVnni>(g, nb, x, y, ys);
  }
};
template <bool kVnni>
struct Q6K {
  template <int R>
  static void run(const uint8_t* g, int64_t nb, const ActQ8KS& x, float* y, int64_t ys) {
    gemm_q6_k_r<R, kVnni>(g, nb, x, y, ys);
  }
};
template <bool kVnni>
void gemm_q4_k(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  by_fours<KScaleMin<false, kVnni>>(g, nb, x, R, y, ys);
}
template <bool kVnni>
void gemm_q5_k(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  by_fours<KScaleMin<true, kVnni>>(g, nb, x, R, y, ys);
}
template <bool kVnni>
void gemm_q6_k(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys) {
  by_fours<Q6K<kVnni>>(g, nb, x, R, y, ys);
}

}  // namespace
}  // namespace kvik::avx2
