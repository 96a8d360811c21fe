// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; chosen at run time only on CPUs that have them).
#include <immintrin.h>

#include "core/fp16.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik {
namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

float dot_f32(const float* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
}

inline __m256 load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

float dot_f16(const uint16_t* w, const uint16_t* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(load_f16(w + i), load_f16(x + i), a0);
    a1 = _mm256_fmadd_ps(load_f16(w + i + 8), load_f16(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16(w + i), load_f16(x + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += fp16_to_f32(w[i]) * fp16_to_f32(x[i]);
  return s;
}

float dot_bf16(const uint16_t* w, const uint16_t* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(load_bf16(w + i), load_bf16(x + i), a0);
    a1 = _mm256_fmadd_ps(load_bf16(w + i + 8), load_bf16(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(w + i), load_bf16(x + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += bf16_to_f32(w[i]) * bf16_to_f32(x[i]);
  return s;
}

// Signed int8 × int8 dot of 32 pairs into 8 int32 lanes: |w| (u8) × (x · sign w) (s8), the maddubs trick.
inline __m256 dot32_i8(__m256i w, __m256i x) {
  const __m256i aw = _mm256_sign_epi8(w, w);
  const __m256i sx = _mm256_sign_epi8(x, w);
  const __m256i p16 = _mm256_maddubs_epi16(aw, sx);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 d = _mm256_set1_ps(fp16_to_f32(w[b].d) * fp16_to_f32(x[b].d));
    const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    acc = _mm256_fmadd_ps(d, dot32_i8(qw, qx), acc);
  }
  return hsum(acc);
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), off = _mm256_set1_epi8(8);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 d = _mm256_set1_ps(fp16_to_f32(w[b].d) * fp16_to_f32(x[b].d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    const __m256i qw = _mm256_sub_epi8(_mm256_and_si256(both, m4), off);
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    acc = _mm256_fmadd_ps(d, dot32_i8(qw, qx), acc);
  }
  return hsum(acc);
}

void to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) { generic_kernels().quantize_q8_0(x, y, n); }

constexpr CpuKernels kAvx2 = {"avx2", dot_f32, dot_f16, dot_bf16, dot_q8_0, dot_q4_0, quantize_q8_0, to_f16, to_bf16};

}  // namespace

const CpuKernels* avx2_kernels() { return &kAvx2; }

}  // namespace kvik
