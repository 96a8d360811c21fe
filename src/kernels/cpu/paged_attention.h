// Attention over the paged KV cache (PagedAttention; docs/concepts.md) and the write of new K/V rows into it.
// Cache layout per layer: [num_blocks, block_size, n_kv, d_h] of the cache's element type: F32, F16, Q8_0 (each
// token's K or V row of a layer as Q8_0 blocks of 32, so n_kv·d_h % 32 == 0) or F8_E4M3 (one byte per value of
// x / scale, one scale per layer and K or V: vLLM's fp8 cache; 1.0 unless set).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvik {

// Attention for a flat batch of requests (prefill chunks and decodes mixed). Request r owns query rows
// [query_start_loc[r], query_start_loc[r+1]); its keys are positions [0, seq_lens[r]) stored in blocks
// block_tables[r * max_blocks_per_seq + pos / block_size]. A query at position p sees keys 0..p (causal), or with a
// sliding window W only the last W of them, p − W + 1..p (Mistral's sliding_window; llama.cpp's
// LLAMA_SWA_TYPE_STANDARD).
struct PagedAttentionArgs {
  const float* q = nullptr;  // [T, n_h, d_h]
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  DType kv_dtype = DType::F32;
  float k_scale = 1.0f, v_scale = 1.0f;  // F8_E4M3: the stored value is x / scale
  float* out = nullptr;                  // [T, n_h, d_h]
  int32_t num_reqs = 0;
  const int32_t* query_start_loc = nullptr;  // [num_reqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_reqs]
  const int32_t* positions = nullptr;        // [T]
  const int32_t* block_tables = nullptr;     // [num_reqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 16;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;  // W, or 0: all keys
  float softcap = 0.0f;        // Gemma 2: each scaled score s becomes softcap · tanh(s / softcap); 0: none
};
void paged_attention(const PagedAttentionArgs& a);
// Flash-decoding: when a step has fewer (request, KV head) tasks than threads, a one-row task over
// 1024 keys or more is split across threads by key range and the parts combined in key order. On by default; the
// results are the same bit for bit either way (off: to measure what it buys).
void set_split_attention(bool on);
int64_t split_attention_tasks();  // tasks split so far in this process

// Writes k/v rows [T, n_kv, d_h] into the cache slots slot_mapping[t] (= block * block_size + offset), each row
// converted to `dtype` on its own (F8_E4M3: divided by k_scale / v_scale first).
void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t T, int64_t kv_dim, void* k_cache,
              void* v_cache, DType dtype, float k_scale = 1.0f, float v_scale = 1.0f);

// Whether the KV cache can be stored as `t` (F32, F16, Q8_0, F8_E4M3), and the bytes of one cache row of n values
// (n a multiple of 32 for Q8_0).
bool is_kv_cache_dtype(DType t);
int64_t kv_row_bytes(DType t, int64_t n);

}  // namespace kvik
