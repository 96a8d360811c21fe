// KVCacheManager alone, with fake requests and no model: slot allocation as a request grows, the prefix cache
// (docs/concepts.md's 992-of-1000 example), fork with copy-on-write of the last partial block, waste.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "kv_requests.h"

namespace kvik {
namespace {

using test::fake_request;
using test::prefill;

TEST(KVCacheManager, AllocateSlotsGrowsOneBlockPerBlockSizeTokens) {
  KVCacheManager kv(10, 4, true);
  auto r = fake_request("a", 5);
  ASSERT_TRUE(kv.allocate_slots(*r, 5));
  EXPECT_EQ(kv.block_table("a").size(), 2);  // 5 tokens in blocks of 4
  r->num_computed_tokens = 5;
  for (int64_t step = 0; step < 3; ++step) {  // decodes at positions 5, 6, 7 fit the second block
    r->append_output_token(1);
    ASSERT_TRUE(kv.allocate_slots(*r, 1));
    r->num_computed_tokens += 1;
    EXPECT_EQ(kv.block_table("a").size(), 2);
  }
  r->append_output_token(1);
  ASSERT_TRUE(kv.allocate_slots(*r, 1));  // position 8 needs a third block
  EXPECT_EQ(kv.block_table("a").size(), 3);
  EXPECT_EQ(kv.pool().num_free_blocks(), 7);
  // Slot mapping: token p lives in block p / 4 at offset p % 4.
  const BlockTable& t = kv.block_table("a");
  EXPECT_EQ(t.slot(6, 4), t.blocks[1]->block_id * 4 + 2);
}

TEST(KVCacheManager, RefusesWhenThePoolIsShortAndLeavesNoTrace) {
  KVCacheManager kv(3, 4, true);
  auto a = fake_request("a", 8), b = fake_request("b", 8);
  ASSERT_TRUE(kv.allocate_slots(*a, 8));
  EXPECT_FALSE(kv.allocate_slots(*b, 8)) << "needs 2 blocks, 1 free";
  EXPECT_TRUE(kv.block_table("b").empty());
  EXPECT_EQ(kv.num_requests(), 1);
  EXPECT_FALSE(kv.allocate_slots(*b, 1, nullptr, 1)) << "1 block would leave fewer than the 1 reserved";
  EXPECT_TRUE(kv.allocate_slots(*b, 1));
}

TEST(KVCacheManager, ThePrefixExample992Of1000) {
  // Two 1000-token prompts that share everything but the last token, blocks of 16: 62 full blocks (992
  // tokens) are shared; the second request computes only its last 8 tokens.
  KVCacheManager kv(200, 16, true);
  auto a = fake_request("a", 1000);
  prefill(kv, *a);
  auto b = fake_request("b", 1000);
  b->prompt_token_ids.back() = b->all_token_ids.back() = 7;
  int64_t cached = 0;
  KVCacheBlocks hit = kv.get_computed_blocks(*b, &cached);
  EXPECT_EQ(cached, 992);
  EXPECT_EQ(static_cast<int64_t>(hit.blocks.size()), 62);
  ASSERT_TRUE(kv.allocate_slots(*b, 1000 - cached, &hit));
  EXPECT_EQ(kv.block_table("b").size(), 63);
  for (int i = 0; i < 62; ++i) EXPECT_EQ(kv.block_table("b").blocks[i], kv.block_table("a").blocks[i]);
  EXPECT_NE(kv.block_table("b").blocks[62], kv.block_table("a").blocks[62]);
  EXPECT_EQ(kv.pool().num_free_blocks(), 200 - 63 - 1);
  // A full hit still leaves one token to compute (the step that finishes the prompt makes the logits).
  auto c = fake_request("c", 992);
  EXPECT_EQ(kv.get_computed_blocks(*c, &cached).blocks.size(), 61u);
  EXPECT_EQ(cached, 976);
}

TEST(KVCacheManager, FreedPrefixBlocksStayCachedUntilReused) {
  KVCacheManager kv(8, 4, true);
  auto a = fake_request("a", 8);
  prefill(kv, *a);
  kv.free(*a);
  EXPECT_EQ(kv.pool().num_free_blocks(), 8);
  auto b = fake_request("b", 9);  // same 8 tokens + one
  int64_t cached = 0;
  KVCacheBlocks hit = kv.get_computed_blocks(*b, &cached);
  EXPECT_EQ(cached, 8) << "revived from the free list";
  ASSERT_TRUE(kv.allocate_slots(*b, 1, &hit));
  EXPECT_EQ(kv.pool().num_free_blocks(), 5);
}

TEST(KVCacheManager, ForkSharesBlocksAndCopiesTheLastPartialBlockOnWrite) {
  KVCacheManager kv(10, 4, true);
  auto p = fake_request("p", 6);  // blocks [0..3], [4, 5, _, _]
  prefill(kv, *p);
  auto c0 = fake_request("c0", 6), c1 = fake_request("c1", 6);
  for (auto* c : {c0.get(), c1.get()}) {
    c->num_computed_tokens = 6;
    kv.fork(*p, *c);
  }
  kv.free(*p);  // the prompt request leaves; its sequences hold the blocks
  EXPECT_EQ(kv.block_ids("c0"), kv.block_ids("c1"));
  EXPECT_EQ(kv.pool().block(kv.block_ids("c0")[1]).ref_cnt, 2);
  // c0 writes position 6 into the shared partial block: it gets a copy of the 2 filled slots.
  c0->append_output_token(1);
  ASSERT_TRUE(kv.allocate_slots(*c0, 1));
  std::vector<BlockCopy> copies = kv.take_block_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, kv.block_ids("c1")[1]);
  EXPECT_EQ(copies[0].dst, kv.block_ids("c0")[1]);
  EXPECT_EQ(copies[0].num_slots, 2);
  EXPECT_EQ(kv.block_ids("c0")[0], kv.block_ids("c1")[0]) << "the full block stays shared";
  // c1 is now the last holder of the original: it writes in place, no copy.
  c1->append_output_token(1);
  ASSERT_TRUE(kv.allocate_slots(*c1, 1));
  EXPECT_TRUE(kv.take_block_copies().empty());
  EXPECT_EQ(kv.num_block_copies_total(), 1);
}

// A fork with a local group shares both groups' blocks; the write into the shared partial block copies it in
// each pool, the local pool's copy marked so the runner copies the local layers' KV.
TEST(KVCacheManager, ForkWithALocalGroupCopiesInBothPools) {
  KVCacheManager kv(10, 4, true, /*sliding_window=*/8, /*local_num_blocks=*/10);
  auto p = fake_request("p", 6);
  prefill(kv, *p);
  auto c0 = fake_request("c0", 6), c1 = fake_request("c1", 6);
  for (auto* c : {c0.get(), c1.get()}) {
    c->num_computed_tokens = 6;
    kv.fork(*p, *c);
  }
  kv.free(*p);
  c0->append_output_token(1);
  ASSERT_TRUE(kv.allocate_slots(*c0, 1));
  const std::vector<BlockCopy> copies = kv.take_block_copies();
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_FALSE(copies[0].local);
  EXPECT_TRUE(copies[1].local);
  EXPECT_EQ(copies[1].dst, kv.local_block_table("c0").blocks[1]->block_id);
  EXPECT_EQ(copies[1].num_slots, 2);
  EXPECT_EQ(kv.num_block_copies_total(), 2);
}

// A local group (Gemma's sliding-window layers interleaved with global ones): the global pool keeps every block,
// the local pool frees those out of the window as the request decodes; a request is admitted only when both pools
// have room, and a refusal leaves neither touched; a repeated prompt hits both groups' caches.
TEST(KVCacheManager, LocalGroupFreesOutOfWindowBlocksOnlyThere) {
  KVCacheManager kv(40, 4, true, /*sliding_window=*/4, /*local_num_blocks=*/6);
  ASSERT_TRUE(kv.has_local_group());
  auto big = fake_request("big", 30);  // 8 blocks: the local pool of 6 cannot take it in one step
  EXPECT_FALSE(kv.allocate_slots(*big, 30));
  EXPECT_EQ(kv.pool().num_free_blocks(), 40);
  EXPECT_EQ(kv.local_group()->pool().num_free_blocks(), 6);
  EXPECT_TRUE(kv.block_table("big").empty());
  auto r = fake_request("a", 10);
  prefill(kv, *r);
  for (int step = 0; step < 30; ++step) {  // decode to 40 tokens
    r->append_output_token(7);
    ASSERT_TRUE(kv.allocate_slots(*r, 1)) << "step " << step;
    r->num_computed_tokens += 1;
    kv.cache_computed_blocks(*r);
    const int64_t blocks = (r->num_computed_tokens + 3) / 4;
    EXPECT_EQ(static_cast<int64_t>(kv.block_table("a").held().size()), blocks);
    EXPECT_LE(kv.local_block_table("a").held().size(), 3u) << "window 4, block 4: at most 3 blocks";
    EXPECT_EQ(kv.local_block_table("a").size(), blocks);
  }
  EXPECT_EQ(kv.local_group()->pool().num_free_blocks(),
            6 - static_cast<int64_t>(kv.local_block_table("a").held().size()));
  // The same 40 tokens again: 9 full blocks in the global cache, and the local ones freed but kept hashed.
  auto b = fake_request("b", 40);
  for (int64_t i = 0; i < 40; ++i) b->all_token_ids[i] = r->all_token_ids[i];
  int64_t cached = -1;
  const KVCacheBlocks hit = kv.get_computed_blocks(*b, &cached);
  EXPECT_EQ(hit.blocks.size(), hit.local.size());
  EXPECT_GT(cached, 0);
  EXPECT_EQ(cached % 4, 0);
  ASSERT_FALSE(hit.local.empty());
  EXPECT_EQ(hit.local.front(), nullptr) << "the hit's first local blocks were evicted: only its last window counts";
  EXPECT_NE(hit.local.back(), nullptr);
  kv.free(*r);
  EXPECT_EQ(kv.pool().num_free_blocks(), 40);
  EXPECT_EQ(kv.local_group()->pool().num_free_blocks(), 6);
}

TEST(KVCacheManager, WasteIsAtMostOnePartialBlockPerSequence) {
  for (int32_t bs : {1, 4, 16}) {
    KVCacheManager kv(4096, bs, false);
    for (int64_t len = 1; len <= 100; len += 7) {
      auto r = fake_request("r" + std::to_string(len), len);
      ASSERT_TRUE(kv.allocate_slots(*r, len));
      const int64_t held = kv.block_table(r->request_id).size() * bs;
      EXPECT_GE(held, len);
      EXPECT_LT(held - len, bs) << "len " << len << " block size " << bs;
    }
  }
}

}  // namespace
}  // namespace kvik
