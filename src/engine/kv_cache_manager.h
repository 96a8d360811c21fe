// Per-request KV block accounting on top of BlockPool (vLLM's KVCacheManager): prefix-cache lookup on
// admission, slot allocation for each scheduled chunk, caching of blocks as they fill, and freeing.
// The scheduler asks "can I allocate N slots for this request?"; it never touches block lists itself.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/block_table.h"
#include "engine/request.h"

namespace kvik {

struct KVCacheBlocks {
  std::vector<KVCacheBlock*> blocks;
  std::vector<KVCacheBlock*> local;  // the local layers' blocks (a manager with a local group), else empty
};

// Copy-on-write of a shared block: its first `num_slots` slots (K and V, every layer) go from `src` to `dst`
// before the step's forward pass writes into `dst`.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
  int32_t num_slots = 0;
  bool local = false;      // a block of the local layers' pool (KVCacheManager with a local group)
  std::string request_id;  // the request whose write needs the copy (the ranks check it holds `dst`)
};

struct PrefixCacheStats {
  int64_t queries = 0;  // prompt tokens looked up
  int64_t hits = 0;     // of them found in the cache
};

class KVCacheManager {
 public:
  // sliding_window > 0 (Mistral-style attention over the last W positions): blocks that no query of a request can
  // read any more are handed back to the pool as the request advances (vLLM's SlidingWindowManager), so a long
  // sequence holds about W / block_size + 2 blocks. They keep their hash until evicted, so prefix hits still work.
  //
  // local_num_blocks > 0 (Gemma: sliding-window layers interleaved with global ones): the local layers keep their KV
  // in a pool of their own (a second group of block tables, vLLM's hybrid KV cache manager), where blocks out of
  // the window are freed; the global layers' pool of num_blocks keeps every block. Every call below acts on both
  // groups: a request is admitted or extended only when both have room, its prefix hit is the shorter of the two.
  KVCacheManager(int64_t num_blocks, int32_t block_size, bool enable_caching, int64_t sliding_window = 0,
                 int64_t local_num_blocks = 0);

  int32_t block_size() const { return block_size_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  double usage() const { return pool_.usage(); }

  // Longest run of full blocks of the request's tokens already in the cache. At least one token is always
  // left to compute, so the step that finishes the prompt produces logits.
  KVCacheBlocks get_computed_blocks(Request& req, int64_t* num_computed_tokens);

  // Makes room for `num_new_tokens` more tokens after `req.num_computed_tokens` (plus the prefix-cache
  // blocks `new_computed` on admission). Returns the newly allocated blocks, or nullopt when the pool has
  // too few free blocks (the caller preempts someone and retries) — or when fewer than
  // `num_reserved_blocks` would be left free after it. A block the new tokens go into that other
  // sequences still share (a forked request's partly filled last prompt block) is copied first:
  // copy-on-write into a fresh block, recorded for take_block_copies(); the last holder writes in place.
  std::optional<KVCacheBlocks> allocate_slots(Request& req, int64_t num_new_tokens,
                                              const KVCacheBlocks* new_computed = nullptr,
                                              int64_t num_reserved_blocks = 0);

  // Gives `child` the blocks of `parent` (a fork): one more reference on each, no KV copied.
  void fork(const Request& parent, const Request& child);
  // The copy-on-write copies recorded since the last call, in order (the runner performs them before the
  // step's forward pass).
  std::vector<BlockCopy> take_block_copies();
  int64_t num_block_copies_total() const {
    return num_block_copies_total_ + (local_ ? local_->num_block_copies_total() : 0);
  }

  // Registers in the prefix cache the request's blocks that are full of computed tokens (after a step).
  void cache_computed_blocks(Request& req);

  // After rejected drafts (speculative decoding): frees the blocks past the one holding the request's last
  // computed token. They held only rejected drafts' KV and were never cached.
  void release_rejected(Request& req);

  // Releases every block of the request (tail blocks first in the eviction order).
  void free(Request& req);

  // The request's block table (empty when it holds no blocks).
  const BlockTable& block_table(const std::string& request_id) const;
  // The local layers' table (the request's only table when there is no local group).
  const BlockTable& local_block_table(const std::string& request_id) const {
    return local_ ? local_->block_table(request_id) : block_table(request_id);
  }
  bool has_local_group() const { return local_ != nullptr; }
  const KVCacheManager* local_group() const { return local_.get(); }
  const std::vector<KVCacheBlock*>& blocks_of(const std::string& request_id) const {
    return block_table(request_id).blocks;
  }
  std::vector<int32_t> block_ids(const std::string& request_id) const { return block_table(request_id).ids(); }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  // Counts one admitted request's lookup: `queried` prompt tokens, `hit` of them cached.
  void record_prefix_lookup(int64_t queried, int64_t hit) {
    stats_.queries += queried;
    stats_.hits += hit;
  }
  int64_t num_requests() const { return static_cast<int64_t>(tables_.size()); }
  // Every request holding blocks, by id (RankBlockLedgers follows them on the other ranks of a parallel job).
  const std::unordered_map<std::string, BlockTable>& tables() const { return tables_; }

 private:
  void update_block_hashes(Request& req) const;
  // Whether the blocks allocate_slots needs are free (after freeing what the window no longer reads).
  bool fits(Request& req, int64_t num_new_tokens, const KVCacheBlocks* new_computed, int64_t num_reserved_blocks);
  std::vector<KVCacheBlock*> windowed_hit(Request& req, int64_t limit);
  void free_out_of_window(const Request& req, BlockTable& table);

  int32_t block_size_;
  int64_t sliding_window_;
  BlockPool pool_;
  std::unordered_map<std::string, BlockTable> tables_;  // by request (sequence) id
  struct PendingCopy {
    std::string request_id;
    BlockCopy copy;
  };
  std::vector<PendingCopy> pending_copies_;  // dropped with their request when it is freed (preempted)
  int64_t num_block_copies_total_ = 0;
  PrefixCacheStats stats_;
  std::unique_ptr<KVCacheManager> local_;  // the local layers' group, or null
};

}  // namespace kvik
