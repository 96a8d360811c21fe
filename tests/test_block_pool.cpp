// BlockPool alone, no model: LRU eviction order, reference counts, the hash chain, revival of cached blocks.
#include <gtest/gtest.h>

#include <vector>

#include "engine/block_hash.h"
#include "engine/block_pool.h"

namespace kvik {
namespace {

std::vector<int32_t> ids(const std::vector<KVCacheBlock*>& blocks) {
  std::vector<int32_t> out;
  for (const KVCacheBlock* b : blocks) out.push_back(b->block_id);
  return out;
}

TEST(BlockPool, NewBlocksComeFromTheFrontOfTheFreeListWithOneReference) {
  BlockPool pool(6, true);
  EXPECT_EQ(pool.free_queue().block_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  std::vector<KVCacheBlock*> a = pool.get_new_blocks(2);
  EXPECT_EQ(ids(a), (std::vector<int32_t>{0, 1}));
  for (const KVCacheBlock* b : a) EXPECT_EQ(b->ref_cnt, 1);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(pool.usage(), 2.0 / 6.0);
  EXPECT_THROW(pool.get_new_blocks(5), std::exception);  // more than are free
}

TEST(BlockPool, FreedBlocksJoinTheBackInTheGivenOrderAndAreEvictedInThatOrder) {
  BlockPool pool(4, true);
  std::vector<KVCacheBlock*> a = pool.get_new_blocks(4);
  // A request frees its blocks tail first: 3, 2, 1, 0 — so its last block is evicted first.
  pool.free_blocks(std::vector<KVCacheBlock*>{a[3], a[2], a[1], a[0]});
  EXPECT_EQ(pool.free_queue().block_ids(), (std::vector<int32_t>{3, 2, 1, 0}));
  EXPECT_EQ(ids(pool.get_new_blocks(1)), std::vector<int32_t>{3});
  EXPECT_EQ(ids(pool.get_new_blocks(2)), (std::vector<int32_t>{2, 1}));
}

TEST(BlockPool, ReferenceCountsSharedBlocksFreeOnlyAtZero) {
  BlockPool pool(3, true);
  std::vector<KVCacheBlock*> a = pool.get_new_blocks(1);
  pool.touch(a);  // a second holder (a fork or a prefix hit)
  EXPECT_EQ(a[0]->ref_cnt, 2);
  pool.free_blocks(a);
  EXPECT_EQ(a[0]->ref_cnt, 1);
  EXPECT_EQ(pool.num_free_blocks(), 2) << "still held by one";
  pool.free_blocks(a);
  EXPECT_EQ(pool.num_free_blocks(), 3);
  EXPECT_THROW(pool.free_blocks(a), std::exception) << "freed twice";
}

TEST(BlockPool, HashChainDependsOnParentTokensAndExtraKeys) {
  const std::vector<int32_t> t1 = {1, 2, 3, 4}, t2 = {5, 6, 7, 8};
  const BlockHash h1 = hash_block_tokens(std::nullopt, t1);
  EXPECT_EQ(h1, hash_block_tokens(std::nullopt, t1)) << "deterministic within the process";
  const BlockHash h2 = hash_block_tokens(h1, t2);
  EXPECT_NE(h2, hash_block_tokens(std::nullopt, t2)) << "same tokens, different prefix";
  EXPECT_NE(h2, hash_block_tokens(hash_block_tokens(std::nullopt, t2), t2));
  const std::vector<int64_t> lora = {7};
  EXPECT_NE(h1, hash_block_tokens(std::nullopt, t1, lora)) << "extra keys (an adapter id) change the hash";
  // extend_block_hashes covers full blocks only and chains them.
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<BlockHash> hs;
  extend_block_hashes(hs, tokens, 4);
  ASSERT_EQ(hs.size(), 2u);
  EXPECT_EQ(hs[0], h1);
  EXPECT_EQ(hs[1], h2);
  tokens.insert(tokens.end(), {10, 11, 12});
  extend_block_hashes(hs, tokens, 4);
  ASSERT_EQ(hs.size(), 3u);
  EXPECT_EQ(hs[2], hash_block_tokens(h2, std::vector<int32_t>{9, 10, 11, 12}));
}

TEST(BlockPool, CachedBlocksHitAndAreRevivedFromTheFreeList) {
  BlockPool pool(4, true);
  const BlockHash h = hash_block_tokens(std::nullopt, std::vector<int32_t>{1, 2});
  const BlockHash miss = hash_block_tokens(std::nullopt, std::vector<int32_t>{2, 1});
  std::vector<KVCacheBlock*> a = pool.get_new_blocks(2);
  pool.cache_full_block(a[0], h);
  EXPECT_EQ(pool.get_cached_block(h), a[0]);
  EXPECT_EQ(pool.get_cached_block(miss), nullptr);
  // Freed, the block keeps its hash while it waits in the free list...
  pool.free_blocks(std::vector<KVCacheBlock*>{a[1], a[0]});
  EXPECT_EQ(pool.get_cached_block(h), a[0]);
  EXPECT_EQ(pool.free_queue().block_ids(), (std::vector<int32_t>{2, 3, 1, 0}));
  // ...and a hit takes it out of the middle of the list with a new reference.
  KVCacheBlock* hit = pool.get_cached_block(h);
  pool.touch(std::vector<KVCacheBlock*>{hit});
  EXPECT_EQ(hit->ref_cnt, 1);
  EXPECT_EQ(pool.free_queue().block_ids(), (std::vector<int32_t>{2, 3, 1}));
  // A second block with the same content does not replace the first.
  pool.cache_full_block(pool.get_new_blocks(1)[0], h);
  EXPECT_EQ(pool.get_cached_block(h), hit);
}

TEST(BlockPool, ReusingACachedFreeBlockEvictsItsHash) {
  BlockPool pool(2, true);
  const BlockHash h = hash_block_tokens(std::nullopt, std::vector<int32_t>{9});
  std::vector<KVCacheBlock*> a = pool.get_new_blocks(2);
  pool.cache_full_block(a[0], h);
  pool.free_blocks(std::vector<KVCacheBlock*>{a[0], a[1]});  // block 0 is now the LRU block
  std::vector<KVCacheBlock*> b = pool.get_new_blocks(1);
  EXPECT_EQ(b[0]->block_id, 0);
  EXPECT_FALSE(b[0]->block_hash.has_value());
  EXPECT_EQ(pool.get_cached_block(h), nullptr) << "evicted block is a miss";
}

TEST(BlockPool, WithoutCachingNothingIsRegistered) {
  BlockPool pool(2, false);
  const BlockHash h = hash_block_tokens(std::nullopt, std::vector<int32_t>{9});
  std::vector<KVCacheBlock*> a = pool.get_new_blocks(1);
  pool.cache_full_block(a[0], h);
  EXPECT_EQ(pool.get_cached_block(h), nullptr);
}

}  // namespace
}  // namespace kvik
