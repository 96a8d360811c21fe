// 256-bit unpacking of the 32-element weight blocks into s8 quants in element order, shared by the AVX2 and the
// AVX-512 kernels (include only from translation units compiled with -mavx2).
#pragma once

#include <immintrin.h>

#include "core/fp16.h"
#include "tensor/dtype.h"

namespace kvik::avx2 {

// The sum of a vector's 8 lanes: halves, then pairs, then the last two (one fixed order for every kernel).
inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
// The largest of a vector's 8 lanes, in the same order (NaN lanes: vmaxps's rule, the second operand).
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
// The sum of a vector's 8 s32 lanes.
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256i nibbles(const uint8_t* qs) {  // the 32 nibbles of a block in element order, as u8 0..15
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}
// 0x10 in byte j where bit j of the 32 fifth bits qh is set, 0 elsewhere.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  __builtin_memcpy(&bits, qh, 4);
  const __m256i byte_of = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), byte_of), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}
inline __m256i quants(const BlockQ8_0& w) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)); }
inline __m256i quants(const BlockQ4_0& w) { return _mm256_sub_epi8(nibbles(w.qs), _mm256_set1_epi8(8)); }
inline __m256i quants(const BlockQ4_1& w) { return nibbles(w.qs); }
inline __m256i quants(const BlockQ5_0& w) {
  return _mm256_sub_epi8(_mm256_or_si256(nibbles(w.qs), fifth_bits(w.qh)), _mm256_set1_epi8(16));
}
inline __m256i quants(const BlockQ5_1& w) { return _mm256_or_si256(nibbles(w.qs), fifth_bits(w.qh)); }
inline __m256i quants(const BlockIQ4_NL& w) {  // the codebook looked up by vpshufb, one copy per 128-bit lane
  const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  return _mm256_shuffle_epi8(book, nibbles(w.qs));
}

// Σ_b m_w·s_x over a row's blocks for the types with a minimum (Q4_1, Q5_1); 0 for the others. Eight blocks' mins
// at a time, widened by F16C, in eight lanes (a scalar loop of software fp16 conversions and one add chain cost as
// much as the row's dot product itself).
template <typename Block>
float min_terms(const Block* w, const float* xs, int64_t nb) {
  if constexpr (requires { w->m; }) {
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      alignas(16) uint16_t m[8];
      for (int i = 0; i < 8; ++i) m[i] = w[b + i].m;
      acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m))),
                            _mm256_loadu_ps(xs + b), acc);
    }
    float s = hsum(acc);
    for (; b < nb; ++b) s += fp16_to_f32(w[b].m) * xs[b];
    return s;
  } else {
    return 0.0f;
  }
}

}  // namespace kvik::avx2
