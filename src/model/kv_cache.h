// The KV cache's memory: per layer, a K pool and a V pool of [num_blocks, block_size, n_kv, d_h].
// Which block belongs to which request is the engine's business (BlockPool, KVCacheManager); the model only
// reads and writes slots through the batch's block tables and slot mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace kvik {

class KvCacheTensors {
 public:
  // local_num_blocks > 0: the local (sliding-window) layers of a model that interleaves them with global ones get a
  // pool of their own of that many blocks (the engine's second group of block tables, KVCacheManager).
  // A pipeline stage holds the layers [first_layer, end_layer) only (end_layer < 0: every layer).
  KvCacheTensors(const ModelConfig& cfg, int64_t num_blocks, int32_t block_size, DType dtype,
                 int64_t local_num_blocks = 0, int64_t first_layer = 0, int64_t end_layer = -1);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t local_num_blocks() const { return local_num_blocks_; }  // 0: no pool of the local layers' own
  int32_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  void* k(int64_t layer) { return layers_[layer].k.get(); }
  void* v(int64_t layer) { return layers_[layer].v.get(); }
  // KV bytes per token (all layers, K and V; docs/concepts.md): 2 · L · the bytes of one row of
  // n_kv · d_h values (Q8_0: 34 per 32, F8_E4M3: 1 each).
  static int64_t bytes_per_token(const ModelConfig& cfg, DType d) {
    return 2 * cfg.n_layers * kv_row_bytes(d, cfg.kv_dim());
  }
  // Throws kvik::Error when the model's K/V rows cannot be stored as `d` (Q8_0 needs n_kv · d_h % 32 == 0).
  static void check_dtype(const ModelConfig& cfg, DType d);
  int64_t total_bytes() const;
  // Copies the first `num_slots` token slots of block `src` into block `dst`, K and V of every layer (the
  // engine's copy-on-write of a block shared by forked sequences); `local`: a block of the local layers' pool.
  void copy_block(int32_t src, int32_t dst, int32_t num_slots, bool local = false);

 private:
  struct Free {
    size_t bytes = 0;
    void operator()(void* p) const;
  };
  struct Layer {
    std::unique_ptr<void, Free> k, v;
    bool local = false;  // in the local layers' pool
  };
  int64_t num_blocks_, local_num_blocks_ = 0;
  int32_t block_size_;
  DType dtype_;
  int64_t slot_bytes_;  // one token's K (or V) of one layer: n_kv · d_h elements
  int64_t layer_bytes_, local_layer_bytes_ = 0;
  std::vector<Layer> layers_;
};

// How many KV blocks the pool gets (vLLM's determine_available_memory + get_kv_cache_config, for host RAM).
struct KvCacheBudget {
  int32_t block_size = 16;
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 64;
  double kv_cache_memory_gib = 0;  // 0 = memory_utilization × RAM − weights
  double memory_utilization = 0.9;
  int64_t num_kv_blocks = 0;  // > 0 overrides both (tests)
  DType dtype = DType::F16;
  // Speculative decoding's draft model keeps its KV in the same blocks (a second cache of as many blocks): its
  // bytes per token count in every block.
  int64_t draft_bytes_per_token = 0;
  int64_t max_num_batched_tokens = 2048;  // sizes the local layers' pool (below)
};

// What the KV pool can hold (docs/concepts.md, "The KV cache"); computed once at start-up.
struct KvCapacity {
  int64_t bytes_per_token = 0;
  int64_t num_blocks = 0;
  int64_t tokens = 0;
  double gib = 0;
  double max_concurrency = 0;  // tokens / max_model_len
  // A model with local (sliding-window) layers interleaved with global ones: the local layers' own pool, of as many
  // blocks as the max_model_len sequences the budget holds (at most max_num_seqs) need for a window each (⌈W/bs⌉ +
  // 2) plus a step's tokens (at most the one pool's count), and its bytes per token; the bytes it does not take buy
  // the global layers more blocks (num_blocks).
  // 0: one pool for every layer.
  int64_t local_num_blocks = 0;
  int64_t local_bytes_per_token = 0;
};

// Sizes the pool for `budget`; fails with a message naming the flags when not even one sequence of
// max_model_len fits. `weight_bytes` is what the model holds resident (subtracted from the RAM fraction).
// With local layers interleaved with global ones, the local layers get their own pool (KvCapacity::local_num_blocks)
// and bytes_per_token counts the global layers only.
KvCapacity plan_kv_capacity(const ModelConfig& mc, const KvCacheBudget& budget, int64_t weight_bytes);
// The start-up lines: bytes per token as 2 x L x n_kv x d_h x bytes, GiB, tokens, max concurrency.
void log_kv_capacity(const ModelConfig& mc, const KvCacheBudget& budget, const KvCapacity& k);

}  // namespace kvik
