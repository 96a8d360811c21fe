#include "model/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/system.h"

namespace kvik {

void KvCacheTensors::Free::operator()(void* p) const {
  if (p) ::munmap(p, bytes);
}

KvCacheTensors::KvCacheTensors(const ModelConfig& cfg, int64_t num_blocks, int32_t block_size, DType dtype,
                               int64_t local_num_blocks, int64_t first_layer, int64_t end_layer)
    : num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  if (num_blocks <= 0 || block_size <= 0)
    fail("KV cache needs at least one block (got {} × {})", num_blocks, block_size);
  check_dtype(cfg, dtype);
  slot_bytes_ = kv_row_bytes(dtype, cfg.kv_dim());
  layer_bytes_ = num_blocks * block_size * slot_bytes_;
  // Anonymous mappings: zero-filled and page-aligned, and memory is only committed as blocks are first used.
  if (local_num_blocks > 0 && cfg.sliding_window > 0 && !cfg.all_layers_local()) {
    local_num_blocks_ = local_num_blocks;
    local_layer_bytes_ = local_num_blocks * block_size * slot_bytes_;
  }
  auto map = [&](int64_t l, bool local) {
    const size_t bytes = static_cast<size_t>(local ? local_layer_bytes_ : layer_bytes_);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot map {} bytes for the KV cache of layer {}", bytes, l);
    return std::unique_ptr<void, Free>(p, Free{bytes});
  };
  if (end_layer < 0) end_layer = cfg.n_layers;
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const bool local = local_num_blocks_ > 0 && cfg.layer_is_local(l);
    if (l < first_layer || l >= end_layer)  // another pipeline stage's layer
      layers_.push_back(
          Layer{std::unique_ptr<void, Free>(nullptr, Free{}), std::unique_ptr<void, Free>(nullptr, Free{})});
    else
      layers_.push_back(Layer{map(l, local), map(l, local), local});
  }
}

void KvCacheTensors::check_dtype(const ModelConfig& cfg, DType d) {
  if (!is_kv_cache_dtype(d)) fail("--kv-cache-dtype {} is not supported (f32, f16, q8_0, fp8)", dtype_name(d));
  if (d == DType::Q8_0 && cfg.kv_dim() % kQK8_0 != 0)
    fail("--kv-cache-dtype q8_0 needs n_kv x d_h ({} x {} = {}) to be a multiple of 32; use f16 or fp8", cfg.n_kv_heads,
         cfg.head_dim, cfg.kv_dim());
}

int64_t KvCacheTensors::total_bytes() const {
  int64_t n = 0;
  for (const Layer& l : layers_)
    if (l.k) n += 2 * (l.local ? local_layer_bytes_ : layer_bytes_);
  return n;
}

void KvCacheTensors::copy_block(int32_t src, int32_t dst, int32_t num_slots, bool local) {
  const int64_t n = local ? local_num_blocks_ : num_blocks_;
  if (src < 0 || src >= n || dst < 0 || dst >= n || num_slots < 0 || num_slots > block_size_)
    fail("internal: KV block copy {} -> {} of {} slots is out of range", src, dst, num_slots);
  if (src == dst || num_slots == 0) return;
  // Pool layout [num_blocks, block_size, n_kv, d_h]: a block's first slots are one contiguous run.
  const int64_t block_bytes = block_size_ * slot_bytes_;
  const size_t bytes = static_cast<size_t>(num_slots * slot_bytes_);
  for (Layer& l : layers_) {
    if (l.local != local || !l.k) continue;  // the other pool's block of that id, or another stage's layer
    char* k = static_cast<char*>(l.k.get());
    char* v = static_cast<char*>(l.v.get());
    std::memcpy(k + dst * block_bytes, k + src * block_bytes, bytes);
    std::memcpy(v + dst * block_bytes, v + src * block_bytes, bytes);
  }
}

namespace {

// Local layers interleaved with global ones (Gemma): of the `k.num_blocks` blocks planned for every layer, the local
// layers keep only what running sequences' windows need; the bytes of the rest go to the global layers as more
// blocks (unless --num-kv-blocks fixed the count, or the plan was already capped at max_num_seqs full sequences).
void split_local_pool(const ModelConfig& mc, const KvCacheBudget& c, KvCapacity& k) {
  if (mc.sliding_window <= 0 || mc.all_layers_local()) return;
  int64_t n_local = 0;
  for (int64_t l = 0; l < mc.n_layers; ++l) n_local += mc.layer_is_local(l);
  if (n_local == 0) return;
  const int64_t row = kv_row_bytes(c.dtype, mc.kv_dim()), bs = c.block_size;
  k.local_bytes_per_token = 2 * n_local * row;
  const int64_t global_bpt = k.bytes_per_token - k.local_bytes_per_token;
  // Sized for the sequences of max_model_len the budget holds (at most max_num_seqs): each needs all its blocks in
  // the global pool and a window's (⌈W/bs⌉ + 2) in the local one; plus a step's tokens.
  const int64_t per_seq = (mc.sliding_window + bs - 1) / bs + 2;
  const int64_t blocks_per_seq = (c.max_model_len + bs - 1) / bs;
  const int64_t seq_bytes = (blocks_per_seq * global_bpt + per_seq * k.local_bytes_per_token) * bs;
  const int64_t seqs = std::clamp<int64_t>(k.num_blocks * bs * k.bytes_per_token / seq_bytes, 1, c.max_num_seqs);
  const int64_t need = seqs * per_seq + (c.max_num_batched_tokens + bs - 1) / bs;
  k.local_num_blocks = std::min(k.num_blocks, need);
  if (c.num_kv_blocks <= 0) {
    const int64_t spare_bytes = (k.num_blocks - k.local_num_blocks) * bs * k.local_bytes_per_token;
    int64_t more = k.num_blocks + spare_bytes / (bs * global_bpt);
    if (c.kv_cache_memory_gib <= 0) more = std::min(more, std::max(k.num_blocks, c.max_num_seqs * blocks_per_seq));
    k.num_blocks = more;
  }
  k.bytes_per_token = global_bpt;
  k.tokens = k.num_blocks * bs;
  k.gib = static_cast<double>(k.num_blocks * bs * global_bpt + k.local_num_blocks * bs * k.local_bytes_per_token) /
          static_cast<double>(int64_t{1} << 30);
  k.max_concurrency = static_cast<double>(k.tokens) / static_cast<double>(c.max_model_len);
}

}  // namespace

KvCapacity plan_kv_capacity(const ModelConfig& mc, const KvCacheBudget& c, int64_t weight_bytes) {
  KvCapacity k;
  KvCacheTensors::check_dtype(mc, c.dtype);
  k.bytes_per_token = KvCacheTensors::bytes_per_token(mc, c.dtype) + c.draft_bytes_per_token;
  const int64_t block_bytes = k.bytes_per_token * c.block_size;
  const int64_t blocks_per_seq = (c.max_model_len + c.block_size - 1) / c.block_size;
  if (c.num_kv_blocks > 0) {
    k.num_blocks = c.num_kv_blocks;
  } else if (c.kv_cache_memory_gib > 0) {
    k.num_blocks = static_cast<int64_t>(c.kv_cache_memory_gib * static_cast<double>(int64_t{1} << 30)) / block_bytes;
  } else {
    // Like vLLM's --gpu-memory-utilization: a fraction of RAM, less the weights, becomes KV blocks; here no
    // more than max_num_seqs full-length sequences need, since host RAM is shared with everything else.
    const double budget = c.memory_utilization * static_cast<double>(physical_memory_bytes()) - weight_bytes;
    k.num_blocks =
        std::min<int64_t>(static_cast<int64_t>(std::max(0.0, budget)) / block_bytes, c.max_num_seqs * blocks_per_seq);
  }
  k.tokens = k.num_blocks * c.block_size;
  k.gib = static_cast<double>(k.num_blocks * block_bytes) / static_cast<double>(int64_t{1} << 30);
  k.max_concurrency = static_cast<double>(k.tokens) / static_cast<double>(c.max_model_len);
  if (k.num_blocks < blocks_per_seq)
    fail(
        "the KV cache holds {} tokens ({:.3f} GiB at {} bytes per token), fewer than one sequence of max_model_len "
        "{} needs: increase --kv-cache-memory (or --memory-utilization) or lower --max-model-len",
        k.tokens, k.gib, k.bytes_per_token, c.max_model_len);
  split_local_pool(mc, c, k);
  return k;
}

void log_kv_capacity(const ModelConfig& mc, const KvCacheBudget& c, const KvCapacity& k) {
  if (k.local_num_blocks > 0) {
    log_info("KV cache: {}, {} bytes per token in the global layers + {} in the local (sliding-window) layers' pool",
             dtype_name(c.dtype), k.bytes_per_token, k.local_bytes_per_token);
    log_info("Available KV cache memory: {:.2f} GiB", k.gib);
    log_info("KV cache size: {} tokens ({} blocks of {}) for the global layers, {} blocks for the local ones", k.tokens,
             k.num_blocks, c.block_size, k.local_num_blocks);
    log_info("Maximum concurrency for {} tokens per request: {:.2f}x", c.max_model_len, k.max_concurrency);
    return;
  }
  log_info("KV cache: {}, {} bytes per token (2 x L {} x {} bytes per row of n_kv {} x d_h {}){}", dtype_name(c.dtype),
           k.bytes_per_token - c.draft_bytes_per_token, mc.n_layers, kv_row_bytes(c.dtype, mc.kv_dim()), mc.n_kv_heads,
           mc.head_dim,
           c.draft_bytes_per_token > 0
               ? fmt::format(", + {} for the draft model's KV in the same blocks", c.draft_bytes_per_token)
               : "");
  log_info("Available KV cache memory: {:.2f} GiB", k.gib);
  log_info("KV cache size: {} tokens ({} blocks of {})", k.tokens, k.num_blocks, c.block_size);
  log_info("Maximum concurrency for {} tokens per request: {:.2f}x", c.max_model_len, k.max_concurrency);
}

}  // namespace kvik
