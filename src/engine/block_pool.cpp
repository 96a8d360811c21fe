#include "engine/block_pool.h"

#include "core/error.h"

namespace kvik {

FreeBlockQueue::FreeBlockQueue(std::vector<KVCacheBlock>& blocks) {
  head_.next_free = &tail_;
  tail_.prev_free = &head_;
  for (auto& b : blocks) append(&b);
}

KVCacheBlock* FreeBlockQueue::popleft() {
  if (size_ == 0) fail("internal: no free KV block to pop");
  KVCacheBlock* b = head_.next_free;
  remove(b);
  return b;
}

void FreeBlockQueue::remove(KVCacheBlock* b) {
  if (!b->prev_free || !b->next_free) fail("internal: KV block {} is not in the free list", b->block_id);
  b->prev_free->next_free = b->next_free;
  b->next_free->prev_free = b->prev_free;
  b->prev_free = b->next_free = nullptr;
  --size_;
}

void FreeBlockQueue::append(KVCacheBlock* b) {
  if (b->prev_free || b->next_free) fail("internal: KV block {} is already in the free list", b->block_id);
  b->prev_free = tail_.prev_free;
  b->next_free = &tail_;
  tail_.prev_free->next_free = b;
  tail_.prev_free = b;
  ++size_;
}

std::vector<int32_t> FreeBlockQueue::block_ids() const {
  std::vector<int32_t> ids;
  for (const KVCacheBlock* b = head_.next_free; b != &tail_; b = b->next_free) ids.push_back(b->block_id);
  return ids;
}

static std::vector<KVCacheBlock> make_blocks(int64_t n) {
  if (n <= 0) fail("the KV cache needs at least one block");
  std::vector<KVCacheBlock> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i].block_id = static_cast<int32_t>(i);
  return v;
}

BlockPool::BlockPool(int64_t num_blocks, bool enable_caching)
    : blocks_(make_blocks(num_blocks)), free_(blocks_), enable_caching_(enable_caching) {}

KVCacheBlock* BlockPool::get_cached_block(const BlockHash& h) const {
  auto it = cached_.find(h);
  return it == cached_.end() ? nullptr : it->second;
}

void BlockPool::evict_hash(KVCacheBlock* b) {
  if (!b->block_hash) return;
  auto it = cached_.find(*b->block_hash);
  if (it != cached_.end() && it->second == b) cached_.erase(it);
  b->block_hash.reset();
}

std::vector<KVCacheBlock*> BlockPool::get_new_blocks(int64_t n) {
  if (n > num_free_blocks()) fail("internal: {} KV blocks requested, {} free", n, num_free_blocks());
  std::vector<KVCacheBlock*> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    KVCacheBlock* b = free_.popleft();
    if (b->ref_cnt != 0) fail("internal: free KV block {} has ref_cnt {}", b->block_id, b->ref_cnt);
    evict_hash(b);
    b->ref_cnt = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::touch(std::span<KVCacheBlock* const> blocks) {
  for (KVCacheBlock* b : blocks) {
    if (b->ref_cnt == 0) free_.remove(b);
    ++b->ref_cnt;
  }
}

void BlockPool::free_blocks(std::span<KVCacheBlock* const> ordered) {
  for (KVCacheBlock* b : ordered) {
    if (b->ref_cnt <= 0) fail("internal: KV block {} freed twice", b->block_id);
    if (--b->ref_cnt == 0) {
      if (!enable_caching_) b->block_hash.reset();
      free_.append(b);
    }
  }
}

void BlockPool::cache_full_block(KVCacheBlock* b, const BlockHash& h) {
  if (!enable_caching_ || b->block_hash) return;
  // When another block already holds this content, keep the first: both hold identical KV.
  if (cached_.count(h)) return;
  b->block_hash = h;
  cached_.emplace(h, b);
}

}  // namespace kvik
