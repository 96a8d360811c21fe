// A sequence's block table (vLLM's block_table): the KV blocks that hold its tokens, in order — token p
// lives in blocks[p / block_size] at offset p % block_size, so its slot (slot_mapping) is
// block_id · block_size + p % block_size. KVCacheManager owns one per running sequence; ModelRunner copies
// the ids into the step's flat block_tables.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_pool.h"

namespace kvik {

struct BlockTable {
  // nullptr: a block a sliding window no longer reads, handed back to the pool (vLLM's null block); its slots are
  // never read again, so copy_ids may give any id for it.
  std::vector<KVCacheBlock*> blocks;
  int64_t num_out_of_window = 0;  // leading entries already freed by the sliding window
  int64_t num_cached = 0;         // leading blocks registered in the prefix cache

  int64_t size() const { return static_cast<int64_t>(blocks.size()); }
  bool empty() const { return blocks.empty(); }
  int64_t slot(int64_t pos, int32_t block_size) const {
    return static_cast<int64_t>(blocks[static_cast<size_t>(pos / block_size)]->block_id) * block_size +
           pos % block_size;
  }
  void copy_ids(int32_t* out) const {
    for (size_t i = 0; i < blocks.size(); ++i) out[i] = blocks[i] ? blocks[i]->block_id : 0;
  }
  // The blocks held (without the freed entries).
  std::vector<KVCacheBlock*> held() const {
    std::vector<KVCacheBlock*> out;
    for (KVCacheBlock* b : blocks)
      if (b) out.push_back(b);
    return out;
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> out(blocks.size());
    copy_ids(out.data());
    return out;
  }
};

}  // namespace kvik
