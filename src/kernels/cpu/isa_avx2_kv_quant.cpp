// AVX2 attention over Q8_0 and FP8 E4M3 KV caches: eight elements at a time are widened to floats (Q8_0: int8 →
// int32 → float times the block's scale, exact; FP8: a gather from the 256-entry value table) and used as the
// f32 kernels use a loaded vector. Rows whose offset or length is not a multiple of 8 take the scalar reference.
#include <immintrin.h>

#include <algorithm>

#include "core/fp16.h"
#include "core/fp8.h"
#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/kv_quant_kernels.h"

namespace kvik::avx2 {
namespace {

// Elements e..e+7 (e a multiple of 8, so they share one block).
inline __m256 load8(const BlockQ8_0* b, int64_t e) {
  const BlockQ8_0& blk = b[e / 32];
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + e % 32));
  return _mm256_mul_ps(_mm256_set1_ps(fp16_to_f32(blk.d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}
inline __m256 load8(const uint8_t* b, int64_t e) {
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + e));
  return _mm256_i32gather_ps(fp8_e4m3_table().data(), _mm256_cvtepu8_epi32(q), 4);
}

template <typename KV>
bool aligned8(const int64_t* off, int64_t n, int64_t d) {
  if (d % 8 != 0) return false;
  for (int64_t j = 0; j < n; ++j)
    if (off[j] % 8 != 0) return false;
  return true;
}

template <typename KV>
void scores(const float* q, const KV* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, off[j] + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(k, off[j] + i + 8), a1);
    }
    if (i < d) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, off[j] + i), a0);
    out[j] = hsum(_mm256_add_ps(a0, a1)) * scale;
  }
}

// The output row in registers, 64 floats (8 vectors) per pass over the value rows.
template <typename KV>
void wsum(const float* p, const KV* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  for (int64_t c0 = 0; c0 < d; c0 += 64) {
    const int nc = static_cast<int>(std::min<int64_t>(d - c0, 64) / 8);
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      for (int c = 0; c < nc; ++c) acc[c] = _mm256_fmadd_ps(pj, load8(v, off[j] + c0 + 8 * c), acc[c]);
    }
    for (int c = 0; c < nc; ++c) _mm256_storeu_ps(out + c0 + 8 * c, acc[c]);
  }
}

}  // namespace

void scores_q8_0(const float* q, const BlockQ8_0* k, const int64_t* off, int64_t n, int64_t d, float scale,
                 float* out) {
  if (aligned8<BlockQ8_0>(off, n, d))
    scores(q, k, off, n, d, scale, out);
  else
    ref::scores_q8_0(q, k, off, n, d, scale, out);
}
void wsum_q8_0(const float* p, const BlockQ8_0* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  if (aligned8<BlockQ8_0>(off, n, d))
    wsum(p, v, off, n, d, out);
  else
    ref::wsum_q8_0(p, v, off, n, d, out);
}
void scores_fp8(const float* q, const uint8_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  if (aligned8<uint8_t>(off, n, d))
    scores(q, k, off, n, d, scale, out);
  else
    ref::scores_fp8(q, k, off, n, d, scale, out);
}
void wsum_fp8(const float* p, const uint8_t* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  if (aligned8<uint8_t>(off, n, d))
    wsum(p, v, off, n, d, out);
  else
    ref::wsum_fp8(p, v, off, n, d, out);
}

}  // namespace kvik::avx2
