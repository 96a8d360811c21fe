// Attention over quantized KV caches (Q8_0, FP8 E4M3), one query at a time: the scalar references (generic table) and
// the AVX2 versions. The generic table's multi-query entries are these per query; the AVX-512 and AVX2 tables have
// their own (isa_avx512_attention.cpp, isa_avx2_attention.cpp) and fall back to the AVX2 ones where their loaders do
// not fit (Q8_0 rows off block boundaries or 8-element runs, head dims that are not whole vectors).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvik {
namespace ref {
void scores_q8_0(const float* q, const BlockQ8_0* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void wsum_q8_0(const float* p, const BlockQ8_0* v, const int64_t* off, int64_t n, int64_t d, float* out);
void scores_fp8(const float* q, const uint8_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void wsum_fp8(const float* p, const uint8_t* v, const int64_t* off, int64_t n, int64_t d, float* out);
}  // namespace ref
namespace avx2 {
void scores_q8_0(const float* q, const BlockQ8_0* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void wsum_q8_0(const float* p, const BlockQ8_0* v, const int64_t* off, int64_t n, int64_t d, float* out);
void scores_fp8(const float* q, const uint8_t* k, const int64_t* off, int64_t n, int64_t d, float scale, float* out);
void wsum_fp8(const float* p, const uint8_t* v, const int64_t* off, int64_t n, int64_t d, float* out);
}  // namespace avx2
}  // namespace kvik
