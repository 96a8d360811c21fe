// AMX-INT8 (and AMX-BF16, at the end) matmul over the packed weight layouts (packed.h), written once against a tile
// back end:
//  - amx::HwTiles (isa_amx.cpp): the real instructions (ldtilecfg, tileloadd, tdpbsud, tdpbf16ps, tilestored);
//  - a software emulation of the same instructions in the tests, so the tile logic is checked on every CPU with
//    AVX-512, not only on the Sapphire / Emerald / Granite Rapids machines that run it for real.
// Only translation units compiled with AVX-512 flags include this header (the epilogue is AVX-512).
//
// One tile multiply per 32-element block (Q6_K: per 16-element half block, the span of one scale):
//   A [R tokens][32 bytes]  the activations' s8 quants, read in place (row t of ActQ8S / of Q8_K blocks);
//   B [8][64 bytes]         the weights' u8 quants of one 16-row group, k-group by k-group: exactly the packed Q8_0
//                           block (read in place); Q4_0 / IQ4_NL / Q5_0 / Q4_1 / Q5_1 / K-quant nibbles are unpacked
//                           into a 512-byte buffer first;
//   C [R][16 int32]         C[t][i] = Σ_k x[t][k]·w[i][k] (tdpbsud: signed A times unsigned B), exact.
// Each block's integer sums then go through the x16 kernels' epilogue: the offset (−128·Σx, −8·Σx), the K-quant
// sub-block scales and mins in integers, Q4_1's / Q5_1's min term m_w·(d_x·Σx) as a second fma, and per block the
// same fmas in the same order, so every result equals the AVX-512 kernels' bit for bit and the AMX path changes no
// token's output (batch invariance holds across the crossover). Two weight groups share one A tile per block (tiles: A,
// B0, B1, C0, C1).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/packed.h"
#include "tensor/k_quants.h"

// GCC 12 reports the self-initialised placeholder inside _mm512_undefined_*() (used by the conversion intrinsics) as
// maybe-uninitialized once these templates inline deeply (GCC bug 105593); the warning is about the header's idiom.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kvik::amx {

enum Tile : int { kA = 0, kB0 = 1, kB1 = 2, kC0 = 3, kC1 = 4 };

// The tile shapes every kernel uses: A [R][ka bytes], B0/B1 [ka / 4][64 bytes], C0/C1 [R][64 bytes]. The back end
// loads a configuration only when (R, ka) changes on the calling thread.
//
// struct Tiles {
//   static void configure(int R, int ka);
//   template <int T> static void load(const void* p, int64_t stride);
//   template <int T> static void zero();
//   template <int C, int A, int B> static void dot();       // C += A (s8) · B (u8), tdpbsud
//   template <int C, int A, int B> static void dot_bf16();  // C += A (bf16 pairs) · B (bf16 pairs), tdpbf16ps
//   template <int T> static void store(void* p, int64_t stride);
// };

namespace detail {

enum class Quant { kQ8_0, kQ4_0, kIQ4NL, kQ5_0, kQ4_1, kQ5_1 };

inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline void store512(void* p, __m512i v) { _mm512_storeu_si512(p, v); }

// Four packed nibble vectors (element 4v + e in the low nibbles, 16 + 4v + e in the high ones) as the 8 k-groups of
// a B tile: rows 0..3 the low nibbles, rows 4..7 the high ones. kCodebook: each nibble looked up as an IQ4_NL value
// + 128. fifth (Q5_K): bit v of byte e = the fifth bit of the low element of vector v, bit 4 + v of the high one.
template <bool kCodebook>
inline void unpack_nibbles(const uint8_t* qs, const uint8_t* fifth, uint8_t* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i book = _mm512_add_epi8(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues))), _mm512_set1_epi8(-128));
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  const __m512i f = fifth ? load512(fifth) : _mm512_setzero_si512();
  for (int v = 0; v < 4; ++v) {
    const __m512i w = load512(qs + 64 * v);
    __m512i lo = _mm512_and_si512(w, m4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
    if (kCodebook) lo = _mm512_shuffle_epi8(book, lo), hi = _mm512_shuffle_epi8(book, hi);
    if (fifth) {  // bit v → bit 4 (a left shift within the byte), bit 4 + v → bit 4 (a right shift)
      lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_sll_epi16(f, _mm_cvtsi32_si128(4 - v)), bit4));
      hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srl_epi16(f, _mm_cvtsi32_si128(v)), bit4));
    }
    store512(out + 64 * v, lo);
    store512(out + 64 * (4 + v), hi);
  }
}

// Q6_K chunk (32 elements): rows 0..3 of out the low half's 6-bit quants (elements 32c + 4v + e), rows 4..7 the high
// half's (32c + 16 + 4v + e); each half is its own B tile of 4 rows (one scale each).
inline __m512i bits_to_4(__m512i h, int v) {  // bits 2v..2v+1 of each byte → bits 4..5 (shifts stay within the byte)
  return v <= 2 ? _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - 2 * v)) : _mm512_srl_epi16(h, _mm_cvtsi32_si128(2 * v - 4));
}
inline void unpack_q6(const uint8_t* ch, uint8_t* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
  const __m512i hl = load512(ch + 256), hh = load512(ch + 320);
  for (int v = 0; v < 4; ++v) {
    const __m512i q = load512(ch + 64 * v);
    store512(out + 64 * v, _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(bits_to_4(hl, v), m2)));
    store512(out + 256 + 64 * v,
             _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), _mm512_and_si512(bits_to_4(hh, v), m2)));
  }
}

// One or two groups' C tiles for one k-step: B from `b[u]`, A already loaded.
template <class Tiles>
inline void multiply(int n, const uint8_t* const* b, int32_t (*c)[kAmxMaxTokens][16]) {
  Tiles::template zero<kC0>();
  Tiles::template load<kB0>(b[0], 64);
  Tiles::template dot<kC0, kA, kB0>();
  if (n == 2) {
    Tiles::template zero<kC1>();
    Tiles::template load<kB1>(b[1], 64);
    Tiles::template dot<kC1, kA, kB1>();
  }
  Tiles::template store<kC0>(c[0], 64);
  if (n == 2) Tiles::template store<kC1>(c[1], 64);
}

// The float accumulators of two groups' 16 rows for up to kAmxMaxTokens tokens: acc[u][t] is token t's row sums of
// group u.
using Accumulators = __m512[2][kAmxMaxTokens];

// The groups two at a time (the last one alone when G is odd): block(grp, n, b, acc) adds block b of the n groups at
// grp[0..n) into acc; each pair's sums then go to y[t·ys + 16·j + i].
template <class Block>
inline void for_group_pairs(const uint8_t* groups, int64_t G, size_t gb, int64_t nb, int64_t R, float* y, int64_t ys,
                            Block&& block) {
  for (int64_t j = 0; j < G; j += 2) {
    const int n = G - j >= 2 ? 2 : 1;
    const uint8_t* grp[2] = {groups + gb * j, groups + gb * (j + n - 1)};
    Accumulators acc;
    for (int u = 0; u < 2; ++u)
      for (int64_t t = 0; t < kAmxMaxTokens; ++t) acc[u][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) block(grp, n, b, acc);
    for (int u = 0; u < n; ++u)
      for (int64_t t = 0; t < R; ++t) _mm512_storeu_ps(y + t * ys + 16 * (j + u), acc[u][t]);
  }
}

template <class Tiles, Quant kQuant>
void gemm_q(const uint8_t* groups, int64_t G, size_t gb, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  constexpr bool kFifth = kQuant == Quant::kQ5_0 || kQuant == Quant::kQ5_1;
  constexpr bool kMin = kQuant == Quant::kQ4_1 || kQuant == Quant::kQ5_1;  // x = d·q + m: no offset, a min term
  constexpr int64_t Q = kQuant == Quant::kQ8_0 ? kQ8_0PackedQs : kFifth ? kQ5_0PackedQs : kQ4_0PackedQs;
  constexpr int64_t S = kMin ? kMinPairScales : kPairScales;
  constexpr int32_t kOffset = kMin ? 0 : kQuant == Quant::kQ4_0 ? 8 : kQuant == Quant::kQ5_0 ? 16 : 128;
  Tiles::configure(static_cast<int>(R), kQK8_0);
  alignas(64) int32_t c[2][kAmxMaxTokens][16];
  alignas(64) uint8_t wb[2][512];
  for_group_pairs(groups, G, gb, nb, R, y, ys, [&](const uint8_t* const* grp, int n, int64_t b, Accumulators& acc) {
    const uint8_t* bsrc[2];
    for (int u = 0; u < n; ++u) {
      const uint8_t* qs = grp[u] + packed_qs_offset(b, Q, S);
      if constexpr (kQuant == Quant::kQ8_0) {
        bsrc[u] = qs;
      } else {
        unpack_nibbles<kQuant == Quant::kIQ4NL>(qs, kFifth ? qs + kQ4_0PackedQs : nullptr, wb[u]);
        bsrc[u] = wb[u];
      }
    }
    Tiles::template load<kA>(x.qs + b * kQK8_0, nb * kQK8_0);
    multiply<Tiles>(n, bsrc, c);
    for (int u = 0; u < n; ++u) {
      const __m512 dw = load_f16x16(grp[u] + packed_d_offset(b, Q, S));
      const __m512 mw = kMin ? load_f16x16(grp[u] + packed_m_offset(b, Q)) : _mm512_setzero_ps();
      for (int64_t t = 0; t < R; ++t) {
        const float dx = x.d[t * nb + b];
        const __m512i s = _mm512_add_epi32(load512(c[u][t]), _mm512_set1_epi32(-kOffset * x.sums[t * nb + b]));
        acc[u][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[u][t]);
        if constexpr (kMin)
          acc[u][t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(dx * static_cast<float>(x.sums[t * nb + b])), acc[u][t]);
      }
    }
  });
}

// Q4_K / Q5_K: per 32-element sub-block one tile multiply, its sums times the row's 6-bit scale into an integer
// sum; the min term Σ_j m_j·Σx_j in integers; per super-block the two fmas of the reference.
template <class Tiles, bool kFifth>
void gemm_k_scale_min(const uint8_t* groups, int64_t G, size_t gb, int64_t nb, const ActQ8KS& x, int64_t R, float* y,
                      int64_t ys) {
  const PackedKScaleMin& L = kFifth ? kPackedQ5K : kPackedQ4K;
  Tiles::configure(static_cast<int>(R), 32);
  alignas(64) int32_t c[2][kAmxMaxTokens][16];
  alignas(64) uint8_t wb[2][512];
  const int64_t xstride = nb * static_cast<int64_t>(sizeof(BlockQ8_K));
  for_group_pairs(groups, G, gb, nb, R, y, ys, [&](const uint8_t* const* grp, int n, int64_t b, Accumulators& acc) {
    __m512i isum[2][kAmxMaxTokens], msum[2][kAmxMaxTokens];
    for (int u = 0; u < 2; ++u)
      for (int64_t t = 0; t < kAmxMaxTokens; ++t) isum[u][t] = msum[u][t] = _mm512_setzero_si512();
    const uint8_t* rec[2] = {grp[0] + b * L.record, grp[1] + b * L.record};
    for (int sb = 0; sb < 8; ++sb) {
      const uint8_t* bsrc[2];
      for (int u = 0; u < n; ++u) {
        unpack_nibbles<false>(rec[u] + sb * 256, kFifth ? rec[u] + L.fifth + sb * 64 : nullptr, wb[u]);
        bsrc[u] = wb[u];
      }
      Tiles::template load<kA>(x.x[b].qs + 32 * sb, xstride);
      multiply<Tiles>(n, bsrc, c);
      for (int u = 0; u < n; ++u) {
        const __m512i sc =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[u] + L.sc + sb * 16)));
        const __m256i mpair = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[u] + L.m + (sb / 2) * 32));
        const __m256i m16 =
            sb % 2 == 0 ? _mm256_and_si256(mpair, _mm256_set1_epi16(0xFF)) : _mm256_srli_epi16(mpair, 8);
        const __m512i m = _mm512_cvtepi16_epi32(m16);
        for (int64_t t = 0; t < R; ++t) {
          isum[u][t] = _mm512_add_epi32(isum[u][t], _mm512_mullo_epi32(sc, load512(c[u][t])));
          msum[u][t] =
              _mm512_add_epi32(msum[u][t], _mm512_mullo_epi32(m, _mm512_set1_epi32(x.sums32[(t * nb + b) * 8 + sb])));
        }
      }
    }
    for (int u = 0; u < n; ++u) {
      const __m512 d = load_f16x16(rec[u] + L.d), dmin = load_f16x16(rec[u] + L.dmin);
      for (int64_t t = 0; t < R; ++t) {
        const __m512 xd = _mm512_set1_ps(x.x[t * nb + b].d);
        acc[u][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[u][t]), _mm512_mul_ps(d, xd), acc[u][t]);
        acc[u][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[u][t]), _mm512_mul_ps(dmin, xd), acc[u][t]);
      }
    }
  });
}

// Q6_K: per 32-element chunk two tile multiplies (16 elements each: one scale per half), the −32 offset as
// −32·Σ sc·bsums, all in integers; per super-block one fma.
template <class Tiles>
void gemm_q6_k(const uint8_t* groups, int64_t G, size_t gb, int64_t nb, const ActQ8KS& x, int64_t R, float* y,
               int64_t ys) {
  Tiles::configure(static_cast<int>(R), 16);
  alignas(64) int32_t c[2][2][kAmxMaxTokens][16];  // [half][group]
  alignas(64) uint8_t wb[2][512];
  const int64_t xstride = nb * static_cast<int64_t>(sizeof(BlockQ8_K));
  for_group_pairs(groups, G, gb, nb, R, y, ys, [&](const uint8_t* const* grp, int n, int64_t b, Accumulators& acc) {
    __m512i isum[2][kAmxMaxTokens];
    for (int u = 0; u < 2; ++u)
      for (int64_t t = 0; t < kAmxMaxTokens; ++t) isum[u][t] = _mm512_setzero_si512();
    const uint8_t* rec[2] = {grp[0] + b * kQ6KRecord, grp[1] + b * kQ6KRecord};
    for (int ch = 0; ch < 8; ++ch) {
      for (int u = 0; u < n; ++u) unpack_q6(rec[u] + q6_k_chunk_offset(ch), wb[u]);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* bsrc[2] = {wb[0] + 256 * h, wb[1] + 256 * h};
        Tiles::template load<kA>(x.x[b].qs + 32 * ch + 16 * h, xstride);
        multiply<Tiles>(n, bsrc, c[h]);
      }
      for (int u = 0; u < n; ++u) {
        const __m256i pair = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[u] + q6_k_sc_offset(ch)));
        const __m512i sc_lo = _mm512_cvtepi16_epi32(_mm256_srai_epi16(_mm256_slli_epi16(pair, 8), 8));
        const __m512i sc_hi = _mm512_cvtepi16_epi32(_mm256_srai_epi16(pair, 8));
        for (int64_t t = 0; t < R; ++t) {
          const BlockQ8_K& xb = x.x[t * nb + b];
          const __m512i off =
              _mm512_add_epi32(_mm512_mullo_epi32(sc_lo, _mm512_set1_epi32(-32 * xb.bsums[2 * ch])),
                               _mm512_mullo_epi32(sc_hi, _mm512_set1_epi32(-32 * xb.bsums[2 * ch + 1])));
          const __m512i p = _mm512_add_epi32(_mm512_mullo_epi32(sc_lo, load512(c[0][u][t])),
                                             _mm512_mullo_epi32(sc_hi, load512(c[1][u][t])));
          isum[u][t] = _mm512_add_epi32(isum[u][t], _mm512_add_epi32(p, off));
        }
      }
    }
    for (int u = 0; u < n; ++u) {
      const __m512 d = load_f16x16(rec[u] + kQ6KD);
      for (int64_t t = 0; t < R; ++t)
        acc[u][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[u][t]), _mm512_mul_ps(d, _mm512_set1_ps(x.x[t * nb + b].d)),
                                    acc[u][t]);
    }
  });
}

// BF16 (AMX-BF16): per 32-input block one B tile [16 pairs][16 rows × 2] read in place from the packed group, against
// one A tile of the same tokens' bf16 activation pairs (bf16_pair_activations). tdpbf16ps adds to each fp32
// accumulator, pair by pair in input order, the pair's even product, then its odd one, each rounded to nearest even;
// the products of bf16 values are exact in fp32, so C0 / C1 hold exactly the reference's single fma chain over all
// blocks in order, stored straight into y. (The tiles also read denormals as zero and flush denormal sums, which the
// reference does not: the only place the two can differ.)
template <class Tiles>
void gemm_bf16(const uint8_t* groups, int64_t G, size_t gb, int64_t nblk, const uint16_t* x, int64_t R, float* y,
               int64_t ys) {
  Tiles::configure(static_cast<int>(R), 64);
  const int64_t xstride = nblk * kBF16TileK * 2;  // bytes from one token's row to the next
  const uint8_t* xa = reinterpret_cast<const uint8_t*>(x);
  for (int64_t j = 0; j < G; j += 2) {
    const bool two = G - j >= 2;
    const uint8_t* g0 = groups + gb * j;
    const uint8_t* g1 = groups + gb * (j + 1);
    Tiles::template zero<kC0>();
    if (two) Tiles::template zero<kC1>();
    for (int64_t b = 0; b < nblk; ++b) {
      Tiles::template load<kA>(xa + b * 64, xstride);
      Tiles::template load<kB0>(g0 + b * kBF16PackedBlock, 64);
      Tiles::template dot_bf16<kC0, kA, kB0>();
      if (two) {
        Tiles::template load<kB1>(g1 + b * kBF16PackedBlock, 64);
        Tiles::template dot_bf16<kC1, kA, kB1>();
      }
    }
    Tiles::template store<kC0>(y + 16 * j, ys * 4);
    if (two) Tiles::template store<kC1>(y + 16 * (j + 1), ys * 4);
  }
}

}  // namespace detail

// A kernel table with the AMX entries over Tiles (AMX-BF16's only when bf16), the rest from `base` (the AVX-512
// table).
template <class Tiles>
CpuKernels with_amx(const CpuKernels& base, std::string_view isa, bool bf16) {
  CpuKernels k = base;
  k.isa = isa;
  using detail::Quant;
  k.amx_q8_0 = detail::gemm_q<Tiles, Quant::kQ8_0>;
  k.amx_q4_0 = detail::gemm_q<Tiles, Quant::kQ4_0>;
  k.amx_iq4_nl = detail::gemm_q<Tiles, Quant::kIQ4NL>;
  k.amx_q5_0 = detail::gemm_q<Tiles, Quant::kQ5_0>;
  k.amx_q4_1 = detail::gemm_q<Tiles, Quant::kQ4_1>;
  k.amx_q5_1 = detail::gemm_q<Tiles, Quant::kQ5_1>;
  k.amx_q4_k = detail::gemm_k_scale_min<Tiles, false>;
  k.amx_q5_k = detail::gemm_k_scale_min<Tiles, true>;
  k.amx_q6_k = detail::gemm_q6_k<Tiles>;
  if (bf16) k.amx_bf16 = detail::gemm_bf16<Tiles>;
  return k;
}

}  // namespace kvik::amx

#pragma GCC diagnostic pop
