// The transformer's operations on the CPU, written against flat row-major float buffers.
// Shapes in comments use the course's names: T tokens in the flat batch, d model width, n_h, n_kv, d_h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "model/model_config.h"
#include "tensor/tensor.h"

namespace kvik {

// y[T, w.rows] = x[T, w.cols] · wᵀ. Activations are converted once to the weight's partner type (f16 for F16,
// bf16 for BF16, Q8_0 for Q8_0/Q4_0, Q8_K for Q4_K/Q5_K/Q6_K), as llama.cpp does. Each output element is one dot product computed the
// same way whatever T is, so a token's result never depends on what else is in the batch.
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y);
// Several matmuls of one input (q/k/v, gate/up): the input is converted once and all outputs' rows are split
// across the threads as one job. Results are those of separate matmul() calls, bit for bit.
struct MatmulOut {
  const WeightMatrix* w;
  float* y;
};
void matmul(const float* x, int64_t T, std::initializer_list<MatmulOut> outs);

// y[T, n] = x / rms(x) * g, row by row (sum of squares in double, as ggml does).
void rmsnorm(const float* x, const float* g, float* y, int64_t T, int64_t n, float eps);

// Rotates the first rope_dim dimensions of each of n_heads heads of one token at position pos, in place.
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim, int32_t pos, float freq_base, RopeType type);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);

// KV cache element type.
enum class KvDType { kF32, kF16 };

// Attention over a paged KV cache for a flat batch of requests (prefill chunks and decodes mixed).
// Request r owns query rows [query_start_loc[r], query_start_loc[r+1]); its keys are positions
// [0, seq_lens[r]) stored in blocks block_tables[r * max_blocks_per_seq + pos / block_size]. A query at
// position p sees keys 0..p (causal). Cache layout per layer: [num_blocks, block_size, n_kv, d_h].
struct PagedAttentionArgs {
  const float* q = nullptr;    // [T, n_h, d_h]
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  KvDType kv_dtype = KvDType::kF32;
  float* out = nullptr;        // [T, n_h, d_h]
  int32_t num_reqs = 0;
  const int32_t* query_start_loc = nullptr;  // [num_reqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_reqs]
  const int32_t* positions = nullptr;        // [T]
  const int32_t* block_tables = nullptr;     // [num_reqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 16;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
};
void paged_attention(const PagedAttentionArgs& a);

// Writes k/v rows [T, n_kv, d_h] into the cache slots slot_mapping[t] (= block * block_size + offset).
void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t T, int64_t kv_dim, void* k_cache,
              void* v_cache, KvDType dtype);

}  // namespace kvik
