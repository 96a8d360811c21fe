// Random weight matrices for the matmul and packed-kernel tests: rows of N(0, 1) quantized to the type.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "tensor/dtype.h"
#include "tensor/k_quants.h"
#include "tensor/tensor.h"

namespace kvik::test {

struct Weights {
  std::vector<uint8_t> data;
  WeightMatrix m;
};

// `unit` makes every product exact: block scales (and K-quant dmin) 1, F32/F16/BF16 weights small integers.
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
          reinterpret_cast<BlockQ4_1*>(dst)[b].d = one, reinterpret_cast<BlockQ4_1*>(dst)[b].m = 0;
          break;
        case DType::Q5_1:
          reinterpret_cast<BlockQ5_1*>(dst)[b].d = one, reinterpret_cast<BlockQ5_1*>(dst)[b].m = 0;
          break;
        default: break;
      }
    }
  }
  w.m = WeightMatrix{t, rows, cols, w.data.data(), rb};
  return w;
}

}  // namespace kvik::test
