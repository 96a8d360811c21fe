// The transformer's operations on the CPU, written against flat row-major float buffers.
// Shapes in comments use the names of docs/concepts.md: T tokens in the flat batch, d model width, n_h, n_kv, d_h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace kvik {

// y[T, w.rows] = x[T, w.cols] · wᵀ. Activations are converted once to the weight's partner type (f16 for F16,
// bf16 for BF16, Q8_0 for Q8_0/Q4_0, Q8_K for Q4_K/Q5_K/Q6_K), as llama.cpp does. Each output element is one dot
// product computed the same way whatever T is, so a token's result never depends on what else is in the batch.
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y);
// Several matmuls of one input (q/k/v, gate/up): the input is converted once and all outputs' rows are split
// across the threads as one job. Results are those of separate matmul() calls, bit for bit.
struct MatmulOut {
  const WeightMatrix* w;
  float* y;
};
void matmul(const float* x, int64_t T, std::initializer_list<MatmulOut> outs);

// llama.cpp's mul_mat_id, the matmul of a mixture of experts: each group multiplies its own contiguous rows of one
// shared input x [N, n] (the tokens routed to one expert) by its own weight, y[i, w.rows] = x[row_begin + i] · wᵀ.
// x is converted once, and every group's rows are one job on the pool, so each expert's weights are read once
// for all its tokens. All weights have n columns. Results are those of matmul() on the group's rows, bit for bit.
struct MatmulGroup {
  const WeightMatrix* w;
  int64_t row_begin, n_rows;
  float* y;  // [n_rows, w.rows]
};
void matmul_grouped(const float* x, int64_t N, std::span<const MatmulGroup> groups);

// y[T, n] = x / rms(x) * g, row by row (sum of squares in double, as ggml does).
void rmsnorm(const float* x, const float* g, float* y, int64_t T, int64_t n, float eps);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// gate[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = x/2 · (1 + tanh(√(2/π) (x + 0.044715 x³))) (Gemma's GeGLU,
// transformers' gelu_pytorch_tanh).
void gelu_tanh_mul(float* gate, const float* up, int64_t n);

}  // namespace kvik
