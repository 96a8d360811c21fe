// AVX2 kernels on repacked F32 / F16 / BF16 weights (packed.h), for the table in isa_avx2.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvik::avx2 {

void gemm_f32_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
void gemm_f16_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
void gemm_bf16_x16(const uint8_t* g, int64_t G, size_t gb, int64_t n, const float* x, int64_t xs, int64_t R, float* y,
                   int64_t ys);

}  // namespace kvik::avx2
