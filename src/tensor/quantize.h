// Weight quantization as llama-quantize does it without an importance matrix: one row quantizer and dequantizer
// per type, byte for byte (and bit for bit) what ggml writes and reads, and row-parallel helpers over whole
// matrices. `kvik quantize`, fake quantization (quantize then dequantize in memory) and the tests use these.
//
// Types: F16, BF16 (plain conversion, round to nearest even), Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (32-element
// blocks), Q4_K, Q5_K, Q6_K (256-element super-blocks with ggml's scale search, tensor/k_quants.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace kvik {

// Row quantizers of the 32-element types. n is a multiple of 32.
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n);
// llama-quantize's IQ4_NL (ggml's quantize_iq4_nl without weights: a ±7-step search around the absmax scale,
// each candidate scored by the x²-weighted least-squares fit), not the quicker quantize_row_iq4_nl_ref.
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);

// The integer quant of element j (0..31) of a block, before scale and offset.
inline int q4_nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4); }
inline int q5_fifth_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }
inline int q4_1_quant(const BlockQ4_1& b, int j) { return q4_nibble(b.qs, j); }  // 0..15
inline int q5_0_quant(const BlockQ5_0& b, int j) {
  return (q4_nibble(b.qs, j) | (q5_fifth_bit(b.qh, j) << 4)) - 16;
}  // −16..15
inline int q5_1_quant(const BlockQ5_1& b, int j) { return q4_nibble(b.qs, j) | (q5_fifth_bit(b.qh, j) << 4); }  // 0..31
inline int iq4_nl_quant(const BlockIQ4_NL& b, int j) { return kIQ4NLValues[q4_nibble(b.qs, j)]; }  // −127..113

// Whether quantize_row / quantize_rows can write type t (F32 included, as a copy).
bool can_quantize(DType t);

// Quantizes nrows rows of n_per_row floats into dst (nrows · row_bytes(t, n_per_row) bytes), rows split over the
// kernels' thread pool. Every row is quantized on its own, so the bytes do not depend on the thread count.
// Throws kvik::Error when n_per_row is not a multiple of t's block size or t cannot be written.
void quantize_rows(DType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row);
// Rows of any type kvik reads (F32, F16, BF16 and every quantized type above) into floats, in parallel.
void dequantize_rows(DType t, const void* src, float* dst, int64_t nrows, int64_t n_per_row);
// Fake quantization: each row of x replaced by dequantize(quantize(row)) in place.
void fake_quantize_rows(DType t, float* x, int64_t nrows, int64_t n_per_row);

}  // namespace kvik
