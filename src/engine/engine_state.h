// A picture of the engine at one step boundary, for the dashboard's KV block map (GET /v1/engine/state): every
// block of the pool with its owner, ref count and prefix-cache hash, and every running or waiting request with
// its block table — PagedAttention's blocks and block tables, from the live engine. Taken on the engine thread
// between two steps (AsyncEngine publishes one when asked), read by any thread: it is immutable once made.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace kvik {

struct EngineStateSnapshot {
  uint64_t sequence = 0;  // published snapshots count up from 1
  std::chrono::system_clock::time_point taken;
  int64_t num_steps = 0;  // engine steps run before it was taken
  int32_t block_size = 0;
  int64_t num_free_blocks = 0;  // free or cached-and-free
  double kv_usage = 0;
  int64_t num_preemptions = 0;
  PrefixCacheStats prefix_cache;
  SpecDecodeStats spec_decode;
  double snapshot_seconds = 0;  // what taking it cost the engine thread

  // Per block, by block id. owner: index into `requests` of the first request whose table holds it, −1 when no
  // request does. A block with ref_cnt 0 and a hash is cached-and-free (evictable, a prefix hit revives it).
  std::vector<int32_t> owner;
  std::vector<int32_t> ref_cnt;
  std::vector<BlockHash> hash;  // {0, 0} when the block has none
  std::vector<uint8_t> has_hash;

  struct RequestInfo {
    std::string id;
    bool running = false;  // else waiting (or preempted: waiting with no blocks)
    int64_t num_prompt_tokens = 0, num_tokens = 0, num_computed_tokens = 0;
    std::string lora;                  // adapter name, "" for the base model
    std::vector<int32_t> block_table;  // block ids in position order; −1 for a block a sliding window freed
  };
  std::vector<RequestInfo> requests;  // running in admission order, then waiting in queue order

  int64_t num_blocks() const { return static_cast<int64_t>(owner.size()); }
};

// Copies the state (O(blocks + requests)); call on the engine thread between steps.
EngineStateSnapshot take_state_snapshot(const EngineCore& core, int64_t num_steps);

}  // namespace kvik
