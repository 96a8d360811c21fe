#include "engine/block_hash.h"

#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

namespace kvik {

namespace {
std::atomic<uint64_t>& seed_storage() {
  static std::atomic<uint64_t> seed{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()};
  return seed;
}
uint64_t process_seed() { return seed_storage().load(std::memory_order_relaxed); }
}  // namespace

void set_block_hash_seed(uint64_t seed) { seed_storage().store(seed, std::memory_order_relaxed); }

BlockHash hash_block_tokens(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens,
                            std::span<const int64_t> extra_keys) {
  // The key's bytes laid end to end and hashed in one call (the same digest as feeding them to a streaming state
  // one by one, without allocating a state per block).
  thread_local std::vector<unsigned char> key;
  key.clear();
  auto put = [](const void* p, size_t n) {
    const size_t at = key.size();
    key.resize(at + n);
    if (n) std::memcpy(key.data() + at, p, n);
  };
  const uint64_t has_parent = parent.has_value();
  put(&has_parent, sizeof has_parent);
  if (parent) put(&*parent, sizeof(BlockHash));
  const uint64_t n = tokens.size();
  put(&n, sizeof n);
  put(tokens.data(), tokens.size_bytes());
  put(extra_keys.data(), extra_keys.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_withSeed(key.data(), key.size(), process_seed());
  return BlockHash{h.low64, h.high64};
}

void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens, int32_t block_size,
                         std::span<const int64_t> extra_keys) {
  const auto full = static_cast<int64_t>(tokens.size()) / block_size;
  while (static_cast<int64_t>(hashes.size()) < full) {
    const auto i = static_cast<int64_t>(hashes.size());
    std::optional<BlockHash> parent;
    if (i > 0) parent = hashes[static_cast<size_t>(i - 1)];
    hashes.push_back(hash_block_tokens(
        parent, tokens.subspan(static_cast<size_t>(i * block_size), static_cast<size_t>(block_size)), extra_keys));
  }
}

}  // namespace kvik
