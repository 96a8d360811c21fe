// Block accounting on every rank of a tensor / pipeline parallel job. Rank 0's KVCacheManager decides which KV
// blocks each request holds; the other ranks only follow the block ids it broadcasts. Each rank keeps a ledger of
// its own (which blocks each request holds, a reference count per block), kept in step with rank 0's tables by a
// few edits broadcast with every step, and checks every slot the step writes, every block table it reads and every
// copy-on-write against it: a rank whose ledger disagrees ends the job naming the rank, the block and the request.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "model/llama.h"

namespace kvik {

// One change of a request's block table, broadcast by rank 0 (16 bytes). index ≥ 0: entry `index` (at most one past
// the end) of request `handle`'s table becomes `block_id` (−1: no block, an entry a sliding window handed back);
// index == kTruncate: the table is cut to `block_id` entries (0: the request holds nothing and is forgotten).
// group 0: the main pool; 1: the local layers' pool (KVCacheManager with a local group).
struct LedgerEdit {
  static constexpr int32_t kTruncate = -1;
  int32_t handle = 0;
  int32_t group = 0;
  int32_t index = 0;
  int32_t block_id = 0;
};

// One pool's ledger: per request handle its block ids (−1 for a null entry), per block the number of table entries
// holding it. Free blocks are those no table holds (the pool's free list, prefix-cached ones included).
class KvBlockLedger {
 public:
  explicit KvBlockLedger(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_cnt_.size()); }
  int64_t num_free_blocks() const { return num_free_; }
  int64_t num_requests() const { return static_cast<int64_t>(tables_.size()); }
  int32_t ref_cnt(int32_t block_id) const { return ref_cnt_[static_cast<size_t>(block_id)]; }
  // The request's block ids (empty when it holds none).
  std::span<const int32_t> table(int32_t handle) const;

  // Applies one edit. An error naming the block and the request when the edit cannot be right: a block outside the
  // pool, an index past the table's end, a truncation longer than the table.
  std::optional<std::string> apply(const LedgerEdit& e);
  // Rank 0: appends to `out` (and applies) the edits that make `handle`'s table equal `ids` (−1: a null entry).
  void sync(int32_t handle, int32_t group, std::span<const int32_t> ids, std::vector<LedgerEdit>& out);

 private:
  void acquire(int32_t block_id);
  void release(int32_t block_id);

  std::vector<int32_t> ref_cnt_;
  int64_t num_free_ = 0;
  std::unordered_map<int32_t, std::vector<int32_t>> tables_;
};

// The ledgers of one rank (the main pool's, and the local layers' when they have a pool of their own) and the
// request handles: small integers rank 0 gives request ids on first sight (a preempted request gets a new one).
class RankBlockLedgers {
 public:
  RankBlockLedgers(int64_t num_blocks, int64_t local_num_blocks);

  const KvBlockLedger& main() const { return groups_[0]; }
  const KvBlockLedger* local() const { return groups_.size() > 1 ? &groups_[1] : nullptr; }

  // Rank 0: the edits that bring the ledgers to `kv`'s block tables since the last call (applied here too), then
  // checks that the ledgers' free blocks equal the pool's — an error when rank 0's own accounting is off.
  std::optional<std::string> publish(const KVCacheManager& kv, std::vector<LedgerEdit>& edits);
  int64_t num_edits_published() const { return num_edits_published_; }
  // Rank 0: the handle of a request holding blocks (given by the last publish()).
  int32_t handle(const std::string& request_id) const;
  // The other ranks: the received edits, in order.
  std::optional<std::string> apply(std::span<const LedgerEdit> edits);

  // Every rank, each step: the slots written (b.slot_mapping, b.local_slot_mapping) and the block tables read by
  // request r (handles[r]) lie in the blocks this rank's ledger gives it; each copy-on-write ([n, 5]: src, dst,
  // num_slots, local, handle) writes into a block of its request and reads a block someone holds.
  std::optional<std::string> check_step(const ForwardBatch& b, std::span<const int32_t> handles, int32_t block_size,
                                        std::span<const int32_t> copies) const;

 private:
  std::optional<std::string> check_request(const ForwardBatch& b, int64_t r, int32_t handle, int32_t block_size,
                                           bool local) const;

  std::vector<KvBlockLedger> groups_;
  std::unordered_map<std::string, int32_t> handles_;  // rank 0: request id → handle
  int32_t next_handle_ = 0;
  int64_t num_edits_published_ = 0;
  std::vector<int32_t> ids_;  // scratch of publish()
};

}  // namespace kvik
