// AVX2 kernels on repacked F32 / F16 / BF16 weights: a 16-row group is two 8-lane halves. Per input k the group's
// 16 weights (two loads, widened for F16 / BF16; BF16's pair layout gives inputs k and k + 1 from the same loads) meet
// the input broadcast, into two accumulators per token and half (even and odd k; BF16 one, all k in order), added at
// the end: the operations and their order of gemm_*_x16_ref, so the results are theirs bit for bit. Sixteen ymm
// registers hold the accumulators of two tokens at a time; a tile of R tokens runs in pairs, each token with its own
// accumulators, so no result depends on R.
#include <immintrin.h>

#include "kernels/cpu/avx2_packed.h"
#include "kernels/cpu/packed.h"

namespace kvik::avx2 {
namespace {

enum class Kind { kF32, kF16, kBF16 };

// Input k's weights of rows 8·half .. 8·half + 7 (F32 / F16).
template <Kind K>
inline __m256 load8(const uint8_t* g, int64_t k, int half) {
  if constexpr (K == Kind::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(g) + k * kPackRows + 8 * half);
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2 * (k * kPackRows + 8 * half))));
  }
}

// Inputs k and k + 1 (k even), rows 8·half .. 8·half + 7: BF16 stores them as pairs in one 32-bit word (packed.h).
template <Kind K>
inline void load8_pair(const uint8_t* g, int64_t k, int half, __m256& w0, __m256& w1) {
  if constexpr (K == Kind::kBF16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 2 * (k * kPackRows + 16 * half)));
    w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u))));
  } else {
    w0 = load8<K>(g, k, half), w1 = load8<K>(g, k + 1, half);
  }
}

template <Kind K, int R>
void gemm_x16_r(const uint8_t* g, int64_t n, const float* x, int64_t xs, float* y, int64_t ys) {
  __m256 even[R][2], odd[R][2];
  for (int t = 0; t < R; ++t) even[t][0] = even[t][1] = odd[t][0] = odd[t][1] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    __m256 w0l, w0h, w1l, w1h;
    load8_pair<K>(g, k, 0, w0l, w1l);
    load8_pair<K>(g, k, 1, w0h, w1h);
    for (int t = 0; t < R; ++t) {
      const __m256 x0 = _mm256_broadcast_ss(x + t * xs + k), x1 = _mm256_broadcast_ss(x + t * xs + k + 1);
      even[t][0] = _mm256_fmadd_ps(w0l, x0, even[t][0]);
      even[t][1] = _mm256_fmadd_ps(w0h, x0, even[t][1]);
      __m256* o = K == Kind::kBF16 ? even[t] : odd[t];  // BF16: one sum, input k + 1 after input k
      o[0] = _mm256_fmadd_ps(w1l, x1, o[0]);
      o[1] = _mm256_fmadd_ps(w1h, x1, o[1]);
    }
  }
  if (k < n) {  // an odd last input (BF16: its pair's zero partner is not used)
    __m256 w0l, w0h, unused;
    if constexpr (K == Kind::kBF16)
      load8_pair<K>(g, k, 0, w0l, unused), load8_pair<K>(g, k, 1, w0h, unused);
    else
      w0l = load8<K>(g, k, 0), w0h = load8<K>(g, k, 1);
    for (int t = 0; t < R; ++t) {
      const __m256 x0 = _mm256_broadcast_ss(x + t * xs + k);
      even[t][0] = _mm256_fmadd_ps(w0l, x0, even[t][0]);
      even[t][1] = _mm256_fmadd_ps(w0h, x0, even[t][1]);
    }
  }
  for (int t = 0; t < R; ++t) {
    const bool one = K == Kind::kBF16;
    _mm256_storeu_ps(y + t * ys, one ? even[t][0] : _mm256_add_ps(even[t][0], odd[t][0]));
    _mm256_storeu_ps(y + t * ys + 8, one ? even[t][1] : _mm256_add_ps(even[t][1], odd[t][1]));
  }
}

// BF16 for one token over G groups (gb bytes apart) at once: its one sum per output and half is a chain of dependent
// fmas, so a pass runs 2·G chains side by side (each chain's fmas are those of gemm_x16_r, in order).
template <int G>
void gemm_bf16_x16_g(const uint8_t* g, size_t gb, int64_t n, const float* x, float* y) {
  __m256 acc[G][2];
  for (int j = 0; j < G; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    const __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + k + 1);
    for (int j = 0; j < G; ++j)
      for (int h = 0; h < 2; ++h) {
        __m256 w0, w1;
        load8_pair<Kind::kBF16>(g + j * gb, k, h, w0, w1);
        acc[j][h] = _mm256_fmadd_ps(w1, x1, _mm256_fmadd_ps(w0, x0, acc[j][h]));
      }
  }
  if (k < n) {  // an odd last input (its pair's zero partner is not used)
    const __m256 x0 = _mm256_broadcast_ss(x + k);
    for (int j = 0; j < G; ++j)
      for (int h = 0; h < 2; ++h) {
        __m256 w0, unused;
        load8_pair<Kind::kBF16>(g + j * gb, k, h, w0, unused);
        acc[j][h] = _mm256_fmadd_ps(w0, x0, acc[j][h]);
      }
  }
  for (int j = 0; j < G; ++j) _mm256_storeu_ps(y + 16 * j, acc[j][0]), _mm256_storeu_ps(y + 16 * j + 8, acc[j][1]);
}

template <Kind K>
void gemm_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  int64_t t = 0;
  for (; t + 2 <= R; t += 2) gemm_x16_r<K, 2>(g, n, x + t * xs, xs, y + t * ys, ys);
  if (t < R) gemm_x16_r<K, 1>(g, n, x + t * xs, xs, y + t * ys, ys);
}

}  // namespace

void gemm_f32_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  gemm_x16<Kind::kF32>(g, n, x, xs, R, y, ys);
}
void gemm_f16_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys) {
  gemm_x16<Kind::kF16>(g, n, x, xs, R, y, ys);
}
// One token: four groups a pass (8 chains); more tokens: one group a pass.
void gemm_bf16_x16(const uint8_t* g, int64_t G, size_t gb, int64_t n, const float* x, int64_t xs, int64_t R, float* y,
                   int64_t ys) {
  int64_t j = 0;
  if (R == 1)
    for (; j + 4 <= G; j += 4) gemm_bf16_x16_g<4>(g + j * gb, gb, n, x, y + 16 * j);
  for (; j < G; ++j) gemm_x16<Kind::kBF16>(g + j * gb, n, x, xs, R, y + 16 * j, ys);
}

}  // namespace kvik::avx2
