// The AVX2 table's attention entries over the paged KV cache (isa_avx2_attention.cpp): the multi-query forms the
// paged attention calls, each K/V row loaded and converted once for a tile of queries, and the one-query forms.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvik::avx2 {

void scores_f32(const float* q, const float* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void scores_f16(const float* q, const uint16_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void wsum_f32(const float* p, const float* v, const int64_t* off, int64_t n, int64_t d, float* out);
void wsum_f16(const float* p, const uint16_t* v, const int64_t* off, int64_t n, int64_t d, float* out);

void scores_multi_f32(const float* q, int64_t q_stride, int64_t nq, const float* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride);
void scores_multi_f16(const float* q, int64_t q_stride, int64_t nq, const uint16_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride);
void scores_multi_q8_0(const float* q, int64_t q_stride, int64_t nq, const BlockQ8_0* k, const int64_t* off, int64_t n,
                       int64_t d, float scale, float* out, int64_t out_stride);
void scores_multi_fp8(const float* q, int64_t q_stride, int64_t nq, const uint8_t* k, const int64_t* off, int64_t n,
                      int64_t d, float scale, float* out, int64_t out_stride);
void wsum_multi_f32(const float* p, int64_t p_stride, int64_t nq, const float* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride);
void wsum_multi_f16(const float* p, int64_t p_stride, int64_t nq, const uint16_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride);
void wsum_multi_q8_0(const float* p, int64_t p_stride, int64_t nq, const BlockQ8_0* v, const int64_t* off, int64_t n,
                     int64_t d, float* out, int64_t out_stride);
void wsum_multi_fp8(const float* p, int64_t p_stride, int64_t nq, const uint8_t* v, const int64_t* off, int64_t n,
                    int64_t d, float* out, int64_t out_stride);
// In-place softmax with a polynomial e^x (exp_ps), within 4e-7 relative of the reference's.
void softmax(float* x, int64_t n);
// gate = silu(gate)·up with the same e^x, within 1e-6 relative of the reference's (≤ 1e-36 where its e^−gate is inf).
void silu_mul(float* gate, const float* up, int64_t n);

}  // namespace kvik::avx2
