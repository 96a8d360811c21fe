#include "engine/block_hash.h"

#include <xxhash.h>

#include <random>

namespace kvik {

namespace {
uint64_t process_seed() {
  static const uint64_t seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  return seed;
}
}  // namespace

BlockHash hash_block_tokens(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens,
                            std::span<const int64_t> extra_keys) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset_withSeed(st, process_seed());
  const uint64_t has_parent = parent.has_value();
  XXH3_128bits_update(st, &has_parent, sizeof has_parent);
  if (parent) XXH3_128bits_update(st, &*parent, sizeof(BlockHash));
  const uint64_t n = tokens.size();
  XXH3_128bits_update(st, &n, sizeof n);
  XXH3_128bits_update(st, tokens.data(), tokens.size_bytes());
  XXH3_128bits_update(st, extra_keys.data(), extra_keys.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
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
