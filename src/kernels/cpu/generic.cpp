// Scalar reference kernels: the definition of correct for every faster version.
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kv_quant_kernels.h"
#include "tensor/quantize.h"

namespace kvik {
namespace {

float dot_f32(const float* w, const float* x, int64_t n) {
  // 16 independent partial sums: the same association order as the SIMD versions' lanes would give.
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += w[i + l] * x[i + l];
  float s = 0.0f;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
}

float dot_f16(const uint16_t* w, const uint16_t* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(fp16_to_f32(w[i])) * fp16_to_f32(x[i]);
  return static_cast<float>(s);
}

float dot_bf16(const uint16_t* w, const uint16_t* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(bf16_to_f32(w[i])) * bf16_to_f32(x[i]);
  return static_cast<float>(s);
}

// The ActQ8 q of element j of block b (−127..127).
inline int32_t act_q(const ActQ8& x, int64_t r, int64_t b, int j) {
  return static_cast<int32_t>(x.qs[r * x.nb * kQK8_0 + act_q8_offset(x.nb, b, j)]) - 128;
}

// Per block: s += (Σ q_w·q_x) · (d_w·d_x), the sum exact in int32.
template <typename Block, int32_t (*Weight)(const Block&, int)>
void gemv_q(const Block* w, const ActQ8& x, int64_t R, float* out) {
  for (int64_t r = 0; r < R; ++r) {
    float s = 0.0f;
    for (int64_t b = 0; b < x.nb; ++b) {
      int32_t sumi = 0;
      for (int j = 0; j < kQK8_0; ++j) sumi += Weight(w[b], j) * act_q(x, r, b, j);
      s += static_cast<float>(sumi) * (fp16_to_f32(w[b].d) * x.d[r * x.nb + b]);
    }
    out[r] = s;
  }
}
int32_t q8_0_weight(const BlockQ8_0& b, int j) { return b.qs[j]; }
int32_t q4_0_weight(const BlockQ4_0& b, int j) { return (j < 16 ? (b.qs[j] & 0x0F) : (b.qs[j - 16] >> 4)) - 8; }
void gemv_q8_0(const BlockQ8_0* w, const ActQ8& x, int64_t R, float* out) {
  gemv_q<BlockQ8_0, q8_0_weight>(w, x, R, out);
}
void gemv_q4_0(const BlockQ4_0* w, const ActQ8& x, int64_t R, float* out) {
  gemv_q<BlockQ4_0, q4_0_weight>(w, x, R, out);
}
int32_t q5_0_weight(const BlockQ5_0& b, int j) { return q5_0_quant(b, j); }
int32_t iq4_nl_weight(const BlockIQ4_NL& b, int j) { return iq4_nl_quant(b, j); }
void gemv_q5_0(const BlockQ5_0* w, const ActQ8& x, int64_t R, float* out) {
  gemv_q<BlockQ5_0, q5_0_weight>(w, x, R, out);
}
void gemv_iq4_nl(const BlockIQ4_NL* w, const ActQ8& x, int64_t R, float* out) {
  gemv_q<BlockIQ4_NL, iq4_nl_weight>(w, x, R, out);
}

// Q4_1 / Q5_1 (x = d·q + m) against Q8_1: per block s += (d_w·d_x)·Σq_w·q_x + m_w·s_x, as ggml's reference.
template <typename Block, int (*Quant)(const Block&, int)>
void gemv_q_min(const Block* w, const ActQ8& x, int64_t R, float* out) {
  for (int64_t r = 0; r < R; ++r) {
    float s = 0.0f;
    for (int64_t b = 0; b < x.nb; ++b) {
      int32_t sumi = 0;
      for (int j = 0; j < kQK8_0; ++j) sumi += Quant(w[b], j) * act_q(x, r, b, j);
      s += (fp16_to_f32(w[b].d) * x.d[r * x.nb + b]) * static_cast<float>(sumi) +
           fp16_to_f32(w[b].m) * x.s[r * x.nb + b];
    }
    out[r] = s;
  }
}
void gemv_q4_1(const BlockQ4_1* w, const ActQ8& x, int64_t R, float* out) {
  gemv_q_min<BlockQ4_1, q4_1_quant>(w, x, R, out);
}
void gemv_q5_1(const BlockQ5_1* w, const ActQ8& x, int64_t R, float* out) {
  gemv_q_min<BlockQ5_1, q5_1_quant>(w, x, R, out);
}

// Per block: s += d·Σ_j sc_j·(q·x)_j − dmin·Σ_j m_j·(Σx)_j, the sums in int32 (|·| < 2³¹ for 6-bit scales).
template <typename Block, int (*Quant)(const Block&, int)>
float dot_k_scale_min(const Block* w, const BlockQ8_K* x, int64_t nb) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(j, w[b].scales, sc, m);
      int32_t p = 0;
      for (int l = 0; l < 32; ++l) p += Quant(w[b], 32 * j + l) * x[b].qs[32 * j + l];
      sumi += sc * p;
      summ += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    const float d = x[b].d * fp16_to_f32(w[b].d), dmin = x[b].d * fp16_to_f32(w[b].dmin);
    s += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return s;
}
float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nb) {
  return dot_k_scale_min<BlockQ4_K, q4_k_quant>(w, x, nb);
}
float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, int64_t nb) {
  return dot_k_scale_min<BlockQ5_K, q5_k_quant>(w, x, nb);
}

// Per block: s += d·Σ_j sc_j·Σ (q − 32)·x over 16 sub-blocks of 16.
float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t p = 0;
      for (int l = 0; l < 16; ++l) p += (q6_k_quant(w[b], 16 * j + l) - 32) * x[b].qs[16 * j + l];
      sumi += w[b].scales[j] * p;
    }
    s += x[b].d * fp16_to_f32(w[b].d) * static_cast<float>(sumi);
  }
  return s;
}

float dot_f32_f16(const float* x, const uint16_t* h, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * fp16_to_f32(h[i]);
  return s;
}

template <typename V, float (*Load)(V)>
void wsum(const float* p, const V* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < d; ++i) out[i] += p[j] * Load(v[off[j] + i]);
}
float load_f32(float x) { return x; }
float load_f16(uint16_t x) { return fp16_to_f32(x); }
void wsum_f32(const float* p, const float* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum<float, load_f32>(p, v, off, n, d, out);
}
void wsum_f16(const float* p, const uint16_t* v, const int64_t* off, int64_t n, int64_t d, float* out) {
  wsum<uint16_t, load_f16>(p, v, off, n, d, out);
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void quantize_act_q8(const float* x, uint8_t* qs, float* d, int64_t n) {
  const int64_t nb = n / kQK8_0;
  BlockQ8_0 blk;
  for (int64_t b = 0; b < nb; ++b) {
    quantize_row(DType::Q8_0, x + b * kQK8_0, &blk, kQK8_0);
    d[b] = fp16_to_f32(blk.d);
    for (int j = 0; j < kQK8_0; ++j) qs[act_q8_offset(nb, b, j)] = static_cast<uint8_t>(blk.qs[j] + 128);
  }
}
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) { quantize_row_q8_k(x, y, n); }
void to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}
void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// Eight independent sums, so the loop is bound by loads rather than one add chain; every way of loading is the same.
uint64_t stream_sum(const uint8_t* p, int64_t bytes, StreamLoad) {
  const auto* w = reinterpret_cast<const uint64_t*>(p);
  uint64_t a[8] = {};
  for (int64_t i = 0; i < bytes / 8; i += 8)
    for (int k = 0; k < 8; ++k) a[k] += w[i + k];
  uint64_t s = 0;
  for (uint64_t v : a) s += v;
  return s;
}

constexpr CpuKernels kGeneric = {
    .isa = "generic",
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q4_k = dot_q4_k,
    .dot_q5_k = dot_q5_k,
    .dot_q6_k = dot_q6_k,
    .dot4_f16 = dot4_by_rows<uint16_t, uint16_t, dot_f16>,
    .dot4_bf16 = dot4_by_rows<uint16_t, uint16_t, dot_bf16>,
    .dot4_q4_k = dot4_by_rows<BlockQ4_K, BlockQ8_K, dot_q4_k>,
    .dot4_q5_k = dot4_by_rows<BlockQ5_K, BlockQ8_K, dot_q5_k>,
    .dot4_q6_k = dot4_by_rows<BlockQ6_K, BlockQ8_K, dot_q6_k>,
    .tile_f32 = tile_by_rows<dot_f32>,
    .dot_f32_f16 = dot_f32_f16,
    .wsum_f32 = wsum_f32,
    .wsum_f16 = wsum_f16,
    .scores_f32 = scores_by_rows<float, dot_f32>,
    .scores_f16 = scores_by_rows<uint16_t, dot_f32_f16>,
    .scores_multi_f32 = scores_multi_by_rows<float, scores_by_rows<float, dot_f32>>,
    .scores_multi_f16 = scores_multi_by_rows<uint16_t, scores_by_rows<uint16_t, dot_f32_f16>>,
    .wsum_multi_f32 = wsum_multi_by_rows<float, wsum_f32>,
    .wsum_multi_f16 = wsum_multi_by_rows<uint16_t, wsum_f16>,
    .scores_q8_0 = ref::scores_q8_0,
    .wsum_q8_0 = ref::wsum_q8_0,
    .scores_fp8 = ref::scores_fp8,
    .wsum_fp8 = ref::wsum_fp8,
    .scores_multi_q8_0 = scores_multi_by_rows<BlockQ8_0, ref::scores_q8_0>,
    .wsum_multi_q8_0 = wsum_multi_by_rows<BlockQ8_0, ref::wsum_q8_0>,
    .scores_multi_fp8 = scores_multi_by_rows<uint8_t, ref::scores_fp8>,
    .wsum_multi_fp8 = wsum_multi_by_rows<uint8_t, ref::wsum_fp8>,
    .softmax = softmax,
    .silu_mul = silu_mul,
    .gemv_q8_0 = gemv_q8_0,
    .gemv_q4_0 = gemv_q4_0,
    .gemv_q4_1 = gemv_q4_1,
    .gemv_q5_0 = gemv_q5_0,
    .gemv_q5_1 = gemv_q5_1,
    .gemv_iq4_nl = gemv_iq4_nl,
    .quantize_act_q8 = quantize_act_q8,
    .quantize_q8_k = quantize_q8_k,
    .to_f16 = to_f16,
    .to_bf16 = to_bf16,
    .stream_sum = stream_sum,
};

}  // namespace

void act_q8_sums(const float* x, const uint8_t* qs, float* s, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t b = 0; b < nb; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[b * kQK8_0 + j]));
    int32_t sum = 0;
    for (int j = 0; j < kQK8_0; ++j) sum += static_cast<int32_t>(qs[act_q8_offset(nb, b, j)]) - 128;
    s[b] = fp16_to_f32(f32_to_fp16(static_cast<float>(sum) * (amax / 127.0f)));
  }
}

const CpuKernels& generic_kernels() { return kGeneric; }

}  // namespace kvik
