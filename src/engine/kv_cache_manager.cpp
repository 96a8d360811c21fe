#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace kvik {

KVCacheManager::KVCacheManager(int64_t num_blocks, int32_t block_size, bool enable_caching, int64_t sliding_window,
                               int64_t local_num_blocks)
    : block_size_(block_size),
      sliding_window_(local_num_blocks > 0 ? 0 : sliding_window),
      pool_(num_blocks, enable_caching) {
  if (block_size <= 0) fail("--block-size must be positive, got {}", block_size);
  if (local_num_blocks > 0) {
    if (sliding_window <= 0) fail("internal: a local layers' KV group needs a sliding window");
    local_ = std::make_unique<KVCacheManager>(local_num_blocks, block_size, enable_caching, sliding_window);
  }
}

// Every query from now on sits at a position ≥ num_computed_tokens and reads keys from p − W + 1 on: the blocks
// wholly before num_computed_tokens − W + 1 are read by no one (speculative rollback never goes below it either).
void KVCacheManager::free_out_of_window(const Request& req, BlockTable& table) {
  const int64_t first_key = req.num_computed_tokens - sliding_window_ + 1;
  const int64_t n = std::min<int64_t>(first_key > 0 ? first_key / block_size_ : 0, table.size());
  for (int64_t i = table.num_out_of_window; i < n; ++i) {
    KVCacheBlock*& b = table.blocks[static_cast<size_t>(i)];
    if (b) pool_.free_blocks(std::span<KVCacheBlock* const>(&b, 1));  // oldest first: evicted first
    b = nullptr;
  }
  table.num_out_of_window = std::max(table.num_out_of_window, n);
}

void KVCacheManager::update_block_hashes(Request& req) const {
  // What changes a request's KV beyond its tokens goes into every block hash (vLLM's extra keys): its
  // interventions and its LoRA adapter. KV computed under one is never shared with another, or with plain KV.
  const auto& iv = req.sampling_params.interventions;
  const auto& lora = req.sampling_params.lora;
  int64_t keys[3];
  size_t n = 0;
  if (iv) keys[n++] = static_cast<int64_t>(iv->cache_key);
  if (lora) keys[n++] = -1, keys[n++] = static_cast<int64_t>(lora->id);  // -1 marks the adapter key
  extend_block_hashes(req.block_hashes, req.all_token_ids, block_size_, std::span<const int64_t>(keys, n));
}

KVCacheBlocks KVCacheManager::get_computed_blocks(Request& req, int64_t* num_computed_tokens) {
  KVCacheBlocks r;
  *num_computed_tokens = 0;
  if (!pool_.enable_caching()) return r;
  update_block_hashes(req);
  // Leave at least one token to compute: a full hit of every block still recomputes the last one.
  const int64_t max_blocks = (req.num_tokens() - 1) / block_size_;
  for (int64_t i = 0; i < max_blocks; ++i) {
    KVCacheBlock* b = pool_.get_cached_block(req.block_hashes[i]);
    if (!b) break;
    r.blocks.push_back(b);
  }
  *num_computed_tokens = static_cast<int64_t>(r.blocks.size()) * block_size_;
  if (local_) {  // the hit both groups have
    r.local = local_->windowed_hit(req, static_cast<int64_t>(r.blocks.size()));
    r.blocks.resize(r.local.size());
    *num_computed_tokens = static_cast<int64_t>(r.blocks.size()) * block_size_;
  }
  return r;
}

// The longest hit of at most `limit` blocks whose last window is cached (vLLM's SlidingWindowManager): a prompt
// resumed after h blocks reads keys from h·bs − W + 1 on, so the blocks before that may be gone (null entries).
std::vector<KVCacheBlock*> KVCacheManager::windowed_hit(Request& req, int64_t limit) {
  if (!pool_.enable_caching() || limit <= 0) return {};
  update_block_hashes(req);
  std::vector<KVCacheBlock*> cached(static_cast<size_t>(limit));
  for (int64_t i = 0; i < limit; ++i) cached[i] = pool_.get_cached_block(req.block_hashes[i]);
  for (int64_t h = limit; h > 0; --h) {
    const int64_t first = std::max<int64_t>(0, h * block_size_ - sliding_window_ + 1) / block_size_;
    bool ok = true;
    for (int64_t i = first; i < h && ok; ++i) ok = cached[i] != nullptr;
    if (!ok) continue;
    std::vector<KVCacheBlock*> r(cached.begin(), cached.begin() + h);
    std::fill(r.begin(), r.begin() + first, nullptr);
    return r;
  }
  return {};
}

bool KVCacheManager::fits(Request& req, int64_t num_new_tokens, const KVCacheBlocks* new_computed,
                          int64_t num_reserved_blocks) {
  BlockTable& table = tables_[req.request_id];
  if (sliding_window_ > 0) free_out_of_window(req, table);
  std::vector<KVCacheBlock*>& blocks = table.blocks;
  const int64_t num_computed_blocks_new = new_computed ? static_cast<int64_t>(new_computed->blocks.size()) : 0;
  const int64_t num_computed = req.num_computed_tokens + num_computed_blocks_new * block_size_;
  const int64_t total = num_computed + num_new_tokens;
  const int64_t needed = (total + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(blocks.size()) + num_computed_blocks_new;
  const int64_t num_new_blocks = std::max<int64_t>(0, needed - have);
  // Blocks already held that the new tokens are written into, shared with another sequence: copy-on-write.
  // Only a fork shares a partly filled block (the prefix cache shares full blocks, never written again).
  int64_t num_copies = 0;
  const int64_t first_written = num_computed / block_size_;
  for (int64_t i = first_written; i < std::min<int64_t>(needed, static_cast<int64_t>(blocks.size())); ++i)
    num_copies += blocks[i]->ref_cnt > 1;
  // Prefix-cache blocks with no other user sit in the free list: touching them takes them out of it.
  int64_t evictable_hits = 0;
  if (new_computed)
    for (const KVCacheBlock* b : new_computed->blocks) evictable_hits += b && b->ref_cnt == 0;
  if (num_new_blocks + num_copies + evictable_hits + num_reserved_blocks > pool_.num_free_blocks()) {
    if (blocks.empty()) tables_.erase(req.request_id);
    return false;
  }
  return true;
}

std::optional<KVCacheBlocks> KVCacheManager::allocate_slots(Request& req, int64_t num_new_tokens,
                                                            const KVCacheBlocks* new_computed,
                                                            int64_t num_reserved_blocks) {
  if (!fits(req, num_new_tokens, new_computed, num_reserved_blocks)) return std::nullopt;
  KVCacheBlocks local_computed;
  if (new_computed) local_computed.blocks = new_computed->local;
  if (local_ && !local_->fits(req, num_new_tokens, new_computed ? &local_computed : nullptr, 0)) {
    if (tables_[req.request_id].empty()) tables_.erase(req.request_id);
    return std::nullopt;
  }
  if (local_) local_->allocate_slots(req, num_new_tokens, new_computed ? &local_computed : nullptr, 0);
  BlockTable& table = tables_[req.request_id];
  std::vector<KVCacheBlock*>& blocks = table.blocks;
  const int64_t num_computed_blocks_new = new_computed ? static_cast<int64_t>(new_computed->blocks.size()) : 0;
  const int64_t num_computed = req.num_computed_tokens + num_computed_blocks_new * block_size_;
  const int64_t needed = (num_computed + num_new_tokens + block_size_ - 1) / block_size_;
  const int64_t num_new_blocks =
      std::max<int64_t>(0, needed - static_cast<int64_t>(blocks.size()) - num_computed_blocks_new);
  const int64_t first_written = num_computed / block_size_;
  int64_t num_copies = 0;  // held blocks the new tokens go into that another sequence shares (a fork's)
  for (int64_t i = first_written; i < std::min<int64_t>(needed, static_cast<int64_t>(blocks.size())); ++i)
    num_copies += blocks[i]->ref_cnt > 1;
  if (new_computed) {  // a local group's hit may start with null entries (out of its window)
    std::vector<KVCacheBlock*> hit;
    for (KVCacheBlock* b : new_computed->blocks)
      if (b) hit.push_back(b);
    table.num_out_of_window += static_cast<int64_t>(new_computed->blocks.size() - hit.size());
    pool_.touch(hit);
    blocks.insert(blocks.end(), new_computed->blocks.begin(), new_computed->blocks.end());
    table.num_cached = table.size();
  }
  if (num_copies > 0) {
    std::vector<KVCacheBlock*> fresh = pool_.get_new_blocks(num_copies);
    size_t k = 0;
    for (int64_t i = first_written; i < std::min<int64_t>(needed, static_cast<int64_t>(blocks.size())); ++i) {
      KVCacheBlock* shared = blocks[i];
      if (shared->ref_cnt <= 1) continue;
      const int64_t filled = std::clamp<int64_t>(num_computed - i * block_size_, 0, block_size_);
      pending_copies_.push_back({req.request_id, BlockCopy{shared->block_id, fresh[k]->block_id,
                                                           static_cast<int32_t>(filled), false, req.request_id}});
      ++num_block_copies_total_;
      blocks[i] = fresh[k++];
      pool_.free_blocks(std::span<KVCacheBlock* const>(&shared, 1));  // the others keep it
    }
  }
  KVCacheBlocks r;
  r.blocks = pool_.get_new_blocks(num_new_blocks);
  blocks.insert(blocks.end(), r.blocks.begin(), r.blocks.end());

  return r;
}

void KVCacheManager::fork(const Request& parent, const Request& child) {
  if (local_) local_->fork(parent, child);
  auto it = tables_.find(parent.request_id);
  if (it == tables_.end()) fail("internal: fork of '{}', which holds no KV blocks", parent.request_id);
  if (tables_.count(child.request_id)) fail("internal: fork into '{}', which already holds blocks", child.request_id);
  BlockTable shared = it->second;
  pool_.touch(shared.held());
  tables_.emplace(child.request_id, std::move(shared));
}

std::vector<BlockCopy> KVCacheManager::take_block_copies() {
  std::vector<BlockCopy> out;
  out.reserve(pending_copies_.size());
  for (const PendingCopy& p : pending_copies_) out.push_back(p.copy);
  pending_copies_.clear();
  if (local_)
    for (BlockCopy c : local_->take_block_copies()) {
      c.local = true;
      out.push_back(c);
    }
  return out;
}

void KVCacheManager::cache_computed_blocks(Request& req) {
  if (local_) local_->cache_computed_blocks(req);
  if (!pool_.enable_caching()) return;
  auto it = tables_.find(req.request_id);
  if (it == tables_.end()) return;
  update_block_hashes(req);
  BlockTable& table = it->second;
  const int64_t full = std::min<int64_t>(
      {req.num_computed_tokens / block_size_, static_cast<int64_t>(req.block_hashes.size()), table.size()});
  for (int64_t i = table.num_cached; i < full; ++i)
    if (table.blocks[i]) pool_.cache_full_block(table.blocks[i], req.block_hashes[i]);
  table.num_cached = std::max(table.num_cached, full);
}

void KVCacheManager::release_rejected(Request& req) {
  if (local_) local_->release_rejected(req);
  auto it = tables_.find(req.request_id);
  if (it == tables_.end()) return;
  std::vector<KVCacheBlock*>& blocks = it->second.blocks;
  const int64_t keep = (req.num_computed_tokens + block_size_ - 1) / block_size_;
  if (static_cast<int64_t>(blocks.size()) <= keep) return;
  std::vector<KVCacheBlock*> ordered(blocks.rbegin(), blocks.rend() - keep);
  pool_.free_blocks(ordered);
  blocks.resize(static_cast<size_t>(keep));
  it->second.num_cached = std::min(it->second.num_cached, keep);
}

void KVCacheManager::free(Request& req) {
  if (local_) local_->free(req);
  auto it = tables_.find(req.request_id);
  if (it == tables_.end()) return;
  std::vector<KVCacheBlock*> ordered = it->second.held();
  std::reverse(ordered.begin(), ordered.end());
  pool_.free_blocks(ordered);
  tables_.erase(it);
  std::erase_if(pending_copies_, [&](const PendingCopy& p) { return p.request_id == req.request_id; });
}

const BlockTable& KVCacheManager::block_table(const std::string& request_id) const {
  static const BlockTable kEmpty;
  auto it = tables_.find(request_id);
  return it == tables_.end() ? kEmpty : it->second;
}

}  // namespace kvik
