#include "model/kv_cache.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace kvik {

void KvCacheTensors::Free::operator()(void* p) const {
  if (p) ::munmap(p, bytes);
}

KvCacheTensors::KvCacheTensors(const ModelConfig& cfg, int64_t num_blocks, int32_t block_size, KvDType dtype)
    : num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  if (num_blocks <= 0 || block_size <= 0) fail("KV cache needs at least one block (got {} × {})", num_blocks, block_size);
  slot_bytes_ = cfg.kv_dim() * elem_bytes(dtype);
  layer_bytes_ = num_blocks * block_size * slot_bytes_;
  // Anonymous mappings: zero-filled and page-aligned, and memory is only committed as blocks are first used.
  const size_t bytes = static_cast<size_t>(layer_bytes_);
  auto map = [&](int64_t l) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot map {} bytes for the KV cache of layer {}", bytes, l);
    return std::unique_ptr<void, Free>(p, Free{bytes});
  };
  for (int64_t l = 0; l < cfg.n_layers; ++l) layers_.push_back(Layer{map(l), map(l)});
}

int64_t KvCacheTensors::total_bytes() const { return 2 * layer_bytes_ * static_cast<int64_t>(layers_.size()); }

void KvCacheTensors::copy_block(int32_t src, int32_t dst, int32_t num_slots) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_ || num_slots < 0 || num_slots > block_size_)
    fail("internal: KV block copy {} -> {} of {} slots is out of range", src, dst, num_slots);
  if (src == dst || num_slots == 0) return;
  // Pool layout [num_blocks, block_size, n_kv, d_h]: a block's first slots are one contiguous run.
  const int64_t block_bytes = block_size_ * slot_bytes_;
  const size_t bytes = static_cast<size_t>(num_slots * slot_bytes_);
  for (Layer& l : layers_) {
    char* k = static_cast<char*>(l.k.get());
    char* v = static_cast<char*>(l.v.get());
    std::memcpy(k + dst * block_bytes, k + src * block_bytes, bytes);
    std::memcpy(v + dst * block_bytes, v + src * block_bytes, bytes);
  }
}

}  // namespace kvik
