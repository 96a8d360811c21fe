#include "model/kv_cache.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace kvik {

void KvCacheTensors::Free::operator()(void* p) const { std::free(p); }

KvCacheTensors::KvCacheTensors(const ModelConfig& cfg, int64_t num_blocks, int32_t block_size, KvDType dtype)
    : num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  if (num_blocks <= 0 || block_size <= 0) fail("KV cache needs at least one block (got {} × {})", num_blocks, block_size);
  layer_bytes_ = num_blocks * block_size * cfg.kv_dim() * elem_bytes(dtype);
  const size_t aligned = (static_cast<size_t>(layer_bytes_) + 63) / 64 * 64;
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    Layer layer;
    layer.k.reset(std::aligned_alloc(64, aligned));
    layer.v.reset(std::aligned_alloc(64, aligned));
    if (!layer.k || !layer.v) fail("cannot allocate {} bytes for the KV cache of layer {}", 2 * aligned, l);
    std::memset(layer.k.get(), 0, aligned);
    std::memset(layer.v.get(), 0, aligned);
    layers_.push_back(std::move(layer));
  }
}

int64_t KvCacheTensors::total_bytes() const { return 2 * layer_bytes_ * static_cast<int64_t>(layers_.size()); }

}  // namespace kvik
