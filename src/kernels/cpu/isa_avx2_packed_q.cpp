// The AVX2 table's kernels on repacked 32-element-block weights (avx2_packed_q_impl.h, without AVX-VNNI) and the
// ActQ8S activation quantizer.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/avx2_packed.h"
#include "kernels/cpu/avx2_packed_q_impl.h"
#include "kernels/cpu/packed.h"
#include "tensor/k_quants.h"

namespace kvik::avx2 {
namespace {

// roundf (half away from zero), exactly: t = trunc(v) and v − t is exact, so |v − t| ≥ ½ decides the step.
inline __m256 round_half_away(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
  const __m256 step = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign));  // ±1 as v
  return _mm256_add_ps(t, _mm256_and_ps(step, one));
}

}  // namespace

void gemm_q8_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_x16<Q::kQ8_0, false>(g, nb, x, R, y, ys);
}
void gemm_q4_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_x16<Q::kQ4_0, false>(g, nb, x, R, y, ys);
}
void gemm_iq4_nl_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_x16<Q::kIQ4_NL, false>(g, nb, x, R, y, ys);
}
void gemm_q5_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_x16<Q::kQ5_0, false>(g, nb, x, R, y, ys);
}
void gemm_q4_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_x16<Q::kQ4_1, false>(g, nb, x, R, y, ys);
}
void gemm_q5_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys) {
  gemm_x16<Q::kQ5_1, false>(g, nb, x, R, y, ys);
}

// Per block as quantize_row Q8_0 (the same amax, d = amax/127, id = 1/d, roundf(x·id)) with Σq.
void quantize_act_q8s(const float* x, int8_t* qs, float* d, int32_t* sums, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i), m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    const float amax = hmax(m);
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    d[b] = fp16_to_f32(f32_to_fp16(dd));
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[i], _mm256_set1_ps(id))));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    sums[b] = hsum_i32(s8);
    // packs interleave the 128-bit lanes: dword j of lane l holds elements of vector j, half l; put them in order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * kQK8_0),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

// quantize_row_q8_k, bit for bit: amax over |x| (NaN skipped, as the reference's `>` does), max = the first element of
// that magnitude with its sign, q = min(127, round-half-even(iscale·x)) by vcvtps2dq in the default rounding mode (the
// reference's 1.5·2²³ trick; |iscale·x| ≤ 127), NaN products (inf inputs) 0 as the reference's int8 truncation of
// its 0, and bsums from the s32 values before packing.
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < kQK_K; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m);
    const float amax = hmax(m);
    BlockQ8_K& o = y[b];
    if (!amax) {
      std::memset(&o, 0, sizeof(o));
      continue;
    }
    float max = amax;
    const __m256 am = _mm256_set1_ps(amax);
    for (int i = 0; i < kQK_K; i += 8) {
      const int hit =
          _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), am, _CMP_EQ_OQ));
      if (hit) {
        max = x[i + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127), invalid = _mm256_set1_epi32(INT32_MIN);
    for (int j = 0; j < kQK_K / 16; ++j) {
      __m256i q[2];
      for (int k = 0; k < 2; ++k) {
        const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * j + 8 * k)));
        q[k] = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, invalid), _mm256_min_epi32(v, top));
      }
      o.bsums[j] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      // s32 → s16 → s8 (exact: -127 ≤ q ≤ 127); packs interleaves 128-bit lanes, the permute puts them back.
      const __m256i q16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
      const __m128i q8 = _mm_packs_epi16(_mm256_castsi256_si128(q16), _mm256_extracti128_si256(q16, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs + 16 * j), q8);
    }
    o.d = 1 / iscale;
  }
}

}  // namespace kvik::avx2
