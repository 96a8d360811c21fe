// Random weight matrices for the matmul and packed-kernel tests: rows of N(0, 1) quantized to the type.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/packed.h"
#include "tensor/dtype.h"
#include "tensor/k_quants.h"
#include "tensor/quantize.h"
#include "tensor/tensor.h"

namespace kvik::test {

struct Weights {
  std::vector<uint8_t> data;
  WeightMatrix m;
};

// `unit` makes every product exact: block scales (and K-quant dmin, Q4_1 / Q5_1 m) 1, F32/F16/BF16 weights small
// integers.
inline Weights random_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng, bool unit = false) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  Weights w;
  const size_t rb = *row_bytes(t, cols);
  w.data.resize(rb * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const bool plain = t == DType::F32 || t == DType::F16 || t == DType::BF16;
    for (auto& v : row) v = unit && plain ? std::round(g(rng) * 8.0f) : g(rng);
    uint8_t* dst = w.data.data() + rb * static_cast<size_t>(r);
    quantize_row(t, row.data(), dst, cols);
    if (!unit || plain) continue;
    const uint16_t one = f32_to_fp16(1.0f);
    for (int64_t b = 0; b < cols / traits(t).block_size; ++b) {
      switch (t) {
        case DType::Q8_0: reinterpret_cast<BlockQ8_0*>(dst)[b].d = one; break;
        case DType::Q4_0: reinterpret_cast<BlockQ4_0*>(dst)[b].d = one; break;
        case DType::Q4_K:
          reinterpret_cast<BlockQ4_K*>(dst)[b].d = reinterpret_cast<BlockQ4_K*>(dst)[b].dmin = one;
          break;
        case DType::Q5_K:
          reinterpret_cast<BlockQ5_K*>(dst)[b].d = reinterpret_cast<BlockQ5_K*>(dst)[b].dmin = one;
          break;
        case DType::Q6_K: reinterpret_cast<BlockQ6_K*>(dst)[b].d = one; break;
        case DType::IQ4_NL: reinterpret_cast<BlockIQ4_NL*>(dst)[b].d = one; break;
        case DType::Q5_0: reinterpret_cast<BlockQ5_0*>(dst)[b].d = one; break;
        case DType::Q4_1:
          reinterpret_cast<BlockQ4_1*>(dst)[b].d = one, reinterpret_cast<BlockQ4_1*>(dst)[b].m = one;
          break;
        case DType::Q5_1:
          reinterpret_cast<BlockQ5_1*>(dst)[b].d = one, reinterpret_cast<BlockQ5_1*>(dst)[b].m = one;
          break;
        default: break;
      }
    }
  }
  w.m = WeightMatrix{t, rows, cols, w.data.data(), rb};
  return w;
}

// Activations of R rows in both packed partner forms.
struct Acts {
  int64_t n = 0;
  std::vector<float> xf;      // the float rows (F32 weights multiply these)
  std::vector<float> xh, xb;  // rounded through fp16 / bf16 (F16 / BF16 weights multiply these)
  const float* half(DType t) const { return t == DType::F16 ? xh.data() : xb.data(); }
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int32_t> sums;
  std::vector<BlockQ8_K> q8k;
  std::vector<int16_t> sums32;
  ActQ8S s8(int64_t t0 = 0) const {
    const int64_t nb = n / kQK8_0;
    return {qs.data() + t0 * n, d.data() + t0 * nb, sums.data() + t0 * nb, nb};
  }
  ActQ8KS k(int64_t t0 = 0) const {
    const int64_t nb = n / kQK_K;
    return {q8k.data() + t0 * nb, sums32.data() + t0 * nb * 8, nb};
  }
};

inline Acts random_acts(int64_t R, int64_t n, std::mt19937& rng, bool unit) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  Acts a;
  a.n = n;
  std::vector<float> x(static_cast<size_t>(R * n));
  for (auto& v : x) v = unit ? std::round(g(rng) * 8.0f) : g(rng);  // unit: small integers, exact F32 sums
  a.xf = x;
  a.xh.resize(x.size()), a.xb.resize(x.size());
  round_through_half(x.data(), a.xh.data(), R * n, true);
  round_through_half(x.data(), a.xb.data(), R * n, false);
  a.qs.resize(R * n), a.d.resize(R * n / kQK8_0), a.sums.resize(R * n / kQK8_0);
  for (int64_t t = 0; t < R; ++t)
    quantize_act_q8s_ref(x.data() + t * n, a.qs.data() + t * n, a.d.data() + t * n / kQK8_0,
                         a.sums.data() + t * n / kQK8_0, n);
  if (unit) std::fill(a.d.begin(), a.d.end(), 1.0f);
  if (n % kQK_K == 0) {
    a.q8k.resize(R * n / kQK_K), a.sums32.resize(R * n / kQK_K * 8);
    for (int64_t t = 0; t < R; ++t) quantize_row_q8_k(x.data() + t * n, a.q8k.data() + t * n / kQK_K, n);
    if (unit)
      for (auto& b : a.q8k) b.d = 1.0f;
    q8_k_sums32(a.q8k.data(), a.sums32.data(), R * n / kQK_K);
  }
  return a;
}

}  // namespace kvik::test
