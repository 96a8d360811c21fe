// Scalar references for attention over Q8_0 and FP8 KV caches: dequantize each element, then the f32 formulas.
#include "core/fp16.h"
#include "core/fp8.h"
#include "kernels/cpu/kv_quant_kernels.h"

namespace kvik::ref {
namespace {

// Element e of a run of Q8_0 blocks (a cache row holds n_kv·d_h / 32 of them).
inline float q8_0_at(const BlockQ8_0* b, int64_t e) { return fp16_to_f32(b[e / 32].d) * b[e / 32].qs[e % 32]; }
inline float q8_0_at(const uint8_t* b, int64_t e) { return fp8_e4m3_to_f32(b[e]); }  // FP8 (overload for the template)

template <typename KV>
void scores(const float* q, const KV* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    float s = 0.0f;
    for (int64_t i = 0; i < d; ++i) s += q[i] * q8_0_at(k, off[j] + i);
    out[j] = s * scale;
  }
}
template <typename KV>
void wsum(const float* p, const KV* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < d; ++i) out[i] += p[j] * q8_0_at(v, off[j] + i);
}

}  // namespace

void scores_q8_0(const float* q, const BlockQ8_0* k, const int64_t* off, int64_t n, int64_t d, float scale,
                 float* out) {
  scores(q, k, off, n, d, scale, out);
}
void wsum_q8_0(const float* p, const BlockQ8_0* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum(p, v, off, n, d, out);
}
void scores_fp8(const float* q, const uint8_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out) {
  scores(q, k, off, n, d, scale, out);
}
void wsum_fp8(const float* p, const uint8_t* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum(p, v, off, n, d, out);
}

}  // namespace kvik::ref
