// The pool of KV-cache blocks (vLLM's BlockPool): block metadata, the free list in eviction order, and the
// prefix cache's hash → block map. It knows nothing of requests; KVCacheManager does the accounting.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"

namespace kvik {

struct KVCacheBlock {
  int32_t block_id = 0;
  int32_t ref_cnt = 0;
  std::optional<BlockHash> block_hash;  // set while the block is full and registered in the prefix cache
  // Intrusive links of the free list (nullptr when not in it).
  KVCacheBlock* prev_free = nullptr;
  KVCacheBlock* next_free = nullptr;
};

// Doubly linked list of free blocks with sentinel head and tail: O(1) pop from the front (the next block to
// evict), append at the back, and removal from the middle when a prefix-cache hit revives a free block.
class FreeBlockQueue {
 public:
  explicit FreeBlockQueue(std::vector<KVCacheBlock>& blocks);
  KVCacheBlock* popleft();
  void remove(KVCacheBlock* b);
  void append(KVCacheBlock* b);
  int64_t size() const { return size_; }
  std::vector<int32_t> block_ids() const;  // front to back, for tests

 private:
  KVCacheBlock head_, tail_;
  int64_t size_ = 0;
};

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, bool enable_caching);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free_blocks() const { return free_.size(); }
  double usage() const { return 1.0 - static_cast<double>(num_free_blocks()) / static_cast<double>(num_blocks()); }
  bool enable_caching() const { return enable_caching_; }

  // A cached block with this hash, or nullptr.
  KVCacheBlock* get_cached_block(const BlockHash& h) const;
  // Pops n blocks from the front of the free list (evicting their cached hashes); ref_cnt becomes 1.
  // Caller checks num_free_blocks() first.
  std::vector<KVCacheBlock*> get_new_blocks(int64_t n);
  // Takes a reference on blocks found in the prefix cache (removing them from the free list if unused).
  void touch(std::span<KVCacheBlock* const> blocks);
  // Drops one reference from each block, in the given order; blocks reaching zero go to the back of the
  // free list in that order (so the first given is evicted first).
  void free_blocks(std::span<KVCacheBlock* const> ordered);
  // Registers a block that has become full under its hash.
  void cache_full_block(KVCacheBlock* b, const BlockHash& h);

  const KVCacheBlock& block(int32_t id) const { return blocks_[id]; }
  const FreeBlockQueue& free_queue() const { return free_; }

 private:
  void evict_hash(KVCacheBlock* b);

  std::vector<KVCacheBlock> blocks_;
  FreeBlockQueue free_;
  bool enable_caching_;
  std::unordered_map<BlockHash, KVCacheBlock*, BlockHashHasher> cached_;
};

}  // namespace kvik
