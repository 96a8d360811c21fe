// The KV cache's memory: per layer, a K pool and a V pool of [num_blocks, block_size, n_kv, d_h].
// Which block belongs to which request is the engine's business (BlockPool, KVCacheManager); the model only
// reads and writes slots through the batch's block tables and slot mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/model_config.h"

namespace kvik {

class KvCacheTensors {
 public:
  KvCacheTensors(const ModelConfig& cfg, int64_t num_blocks, int32_t block_size, KvDType dtype);

  int64_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  KvDType dtype() const { return dtype_; }
  void* k(int64_t layer) { return layers_[layer].k.get(); }
  void* v(int64_t layer) { return layers_[layer].v.get(); }
  // Bytes per element and per token (all layers, K and V), the course's KV bytes per token.
  static int64_t elem_bytes(KvDType d) { return d == KvDType::kF32 ? 4 : 2; }
  static int64_t bytes_per_token(const ModelConfig& cfg, KvDType d) { return cfg.kv_bytes_per_token(elem_bytes(d)); }
  int64_t total_bytes() const;
  // Copies the first `num_slots` token slots of block `src` into block `dst`, K and V of every layer (the
  // engine's copy-on-write of a block shared by forked sequences).
  void copy_block(int32_t src, int32_t dst, int32_t num_slots);

 private:
  struct Free {
    size_t bytes = 0;
    void operator()(void* p) const;
  };
  struct Layer {
    std::unique_ptr<void, Free> k, v;
  };
  int64_t num_blocks_;
  int32_t block_size_;
  KvDType dtype_;
  int64_t slot_bytes_;  // one token's K (or V) of one layer: n_kv · d_h elements
  int64_t layer_bytes_;
  std::vector<Layer> layers_;
};

}  // namespace kvik
