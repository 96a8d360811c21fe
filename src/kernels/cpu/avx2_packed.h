// AVX2 kernels on repacked weights (packed.h), for the table in isa_avx2.cpp: F32 / F16 / BF16
// (isa_avx2_packed.cpp), the 32-element block types with their activation quantizer (isa_avx2_packed_q.cpp) and
// the K-quants (isa_avx2_packed_k.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/packed.h"

namespace kvik::avx2 {

void gemm_f32_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
void gemm_f16_x16(const uint8_t* g, int64_t n, const float* x, int64_t xs, int64_t R, float* y, int64_t ys);
void gemm_bf16_x16(const uint8_t* g, int64_t G, size_t gb, int64_t n, const float* x, int64_t xs, int64_t R, float* y,
                   int64_t ys);
void gemm_q8_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_iq4_nl_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q5_0_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q5_1_x16(const uint8_t* g, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
void gemm_q4_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
void gemm_q5_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
void gemm_q6_k_x16(const uint8_t* g, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);
void quantize_act_q8s(const float* x, int8_t* qs, float* d, int32_t* sums, int64_t n);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n);  // quantize_row_q8_k, bit for bit

}  // namespace kvik::avx2
