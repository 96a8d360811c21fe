// The prefix cache's block identity (vLLM's kv_cache_utils.hash_block_tokens): a full block's hash chains its
// parent's, so equal hashes mean equal token prefixes up to and including that block.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kvik {

// hash(parent block hash, the block's token ids, extra keys such as a LoRA id). 128 bits (XXH3), seeded per
// process, so that a collision (one user handed another user's KV) is not a practical concern.
struct BlockHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const BlockHash&) const = default;
};
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ULL)); }
};

// Replaces the per-process seed; call before any block is hashed. Data parallelism (kvik serve
// --data-parallel-size) gives its replicas one shared secret seed so that its router, hashing a prompt with the
// same function, can match the replicas' prefix caches; the seed never leaves those processes.
void set_block_hash_seed(uint64_t seed);

// hash(parent, tokens, extra_keys); parent is nullopt for the first block of a sequence.
BlockHash hash_block_tokens(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens,
                            std::span<const int64_t> extra_keys = {});

// Appends to `hashes` the chained hash of every full block of `tokens` it does not cover yet.
void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens, int32_t block_size,
                         std::span<const int64_t> extra_keys = {});

}  // namespace kvik
