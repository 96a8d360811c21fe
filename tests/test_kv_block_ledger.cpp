// The per-rank KV block ledgers of a parallel job (engine/kv_block_ledger.h), without MPI: rank 0's ledgers follow a
// KVCacheManager through prefill, a prefix hit, a fork with copy-on-write, a sliding window's freeing and
// preemption; a second ("worker") ledger fed only the edits stays identical, ends all free, and its step check
// catches a slot, a block table entry or a copy that its ledger does not give the request.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/kv_block_ledger.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "kv_requests.h"

namespace kvik {
namespace {

using test::fake_request;
using test::prefill;

// Rank 0's ledgers and a worker's, kept in step as broadcast_step does; after each sync the worker's ledger must
// give every request the same blocks as the manager, and hold each block as often as the pool counts it.
struct Ranks {
  Ranks(KVCacheManager& m, int64_t local_blocks)
      : kv(m), root(m.pool().num_blocks(), local_blocks), worker(m.pool().num_blocks(), local_blocks) {}
  int64_t sync() {
    std::vector<LedgerEdit> edits;
    if (auto err = root.publish(kv, edits)) ADD_FAILURE() << *err;
    if (auto err = worker.apply(edits)) ADD_FAILURE() << *err;
    for (const auto& [id, table] : kv.tables()) {
      const std::span<const int32_t> held = worker.main().table(root.handle(id));
      EXPECT_EQ(std::vector<int32_t>(held.begin(), held.end()), ids(table)) << id;
    }
    for (int32_t b = 0; b < kv.pool().num_blocks(); ++b)
      EXPECT_EQ(worker.main().ref_cnt(b), kv.pool().block(b).ref_cnt) << "block " << b;
    EXPECT_EQ(worker.main().num_free_blocks(), kv.pool().num_free_blocks());
    return static_cast<int64_t>(edits.size());
  }
  static std::vector<int32_t> ids(const BlockTable& t) {
    std::vector<int32_t> v;
    for (const KVCacheBlock* b : t.blocks) v.push_back(b ? b->block_id : -1);
    return v;
  }
  KVCacheManager& kv;
  RankBlockLedgers root, worker;
};

TEST(KvBlockLedger, AWorkerFedOnlyTheEditsFollowsPrefixHitsForksCopiesAndPreemption) {
  KVCacheManager kv(12, 4, true);
  Ranks ranks(kv, 0);
  auto a = fake_request("a", 10);
  prefill(kv, *a);
  EXPECT_EQ(ranks.sync(), 3) << "three blocks allocated: three edits";
  EXPECT_EQ(ranks.sync(), 0) << "nothing changed: nothing sent";
  auto b = fake_request("b", 10);  // the same prompt: a prefix hit on a's two full blocks
  prefill(kv, *b);
  ranks.sync();
  EXPECT_EQ(ranks.worker.main().ref_cnt(kv.block_ids("a")[0]), 2);
  auto c = fake_request("c", 10);
  c->num_computed_tokens = 10;
  kv.fork(*a, *c);
  c->append_output_token(1);
  ASSERT_TRUE(kv.allocate_slots(*c, 1));  // writes a's shared partial block: copy-on-write
  const std::vector<BlockCopy> copies = kv.take_block_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].request_id, "c");
  ranks.sync();
  EXPECT_EQ(ranks.worker.main().table(ranks.root.handle("c"))[2], copies[0].dst);
  kv.free(*a);  // preempted: a new handle when it comes back
  ranks.sync();
  EXPECT_EQ(ranks.worker.main().num_requests(), 2);
  kv.free(*b);
  kv.free(*c);
  ranks.sync();
  EXPECT_EQ(ranks.worker.main().num_free_blocks(), 12);
  EXPECT_EQ(ranks.worker.main().num_requests(), 0);
}

TEST(KvBlockLedger, FollowsALocalGroupWhoseWindowHandsBlocksBack) {
  KVCacheManager kv(40, 4, true, /*sliding_window=*/4, /*local_num_blocks=*/6);
  Ranks ranks(kv, 6);
  auto r = fake_request("a", 10);
  prefill(kv, *r);
  ranks.sync();
  for (int step = 0; step < 20; ++step) {
    r->append_output_token(7);
    ASSERT_TRUE(kv.allocate_slots(*r, 1));
    r->num_computed_tokens += 1;
    ranks.sync();
    const std::span<const int32_t> local = ranks.worker.local()->table(ranks.root.handle("a"));
    EXPECT_EQ(std::vector<int32_t>(local.begin(), local.end()), Ranks::ids(kv.local_block_table("a")));
    EXPECT_EQ(ranks.worker.local()->num_free_blocks(), kv.local_group()->pool().num_free_blocks());
  }
  kv.free(*r);
  ranks.sync();
  EXPECT_EQ(ranks.worker.local()->num_free_blocks(), 6);
  EXPECT_EQ(ranks.worker.main().num_free_blocks(), 40);
}

// One request (handle h) writing positions 8 and 9 of a 10-token sequence in blocks of 4.
struct Step {
  std::vector<int32_t> positions{8, 9}, query_start_loc{0, 2}, seq_lens{10}, block_tables, handles;
  std::vector<int64_t> slot_mapping;
  ForwardBatch view() const {
    ForwardBatch b;
    b.positions = positions;
    b.slot_mapping = slot_mapping;
    b.query_start_loc = query_start_loc;
    b.seq_lens = seq_lens;
    b.block_tables = block_tables;
    b.max_blocks_per_seq = static_cast<int32_t>(block_tables.size());
    return b;
  }
};

TEST(KvBlockLedger, TheStepCheckCatchesASlotATableEntryOrACopyOutsideTheRequestsBlocks) {
  KVCacheManager kv(8, 4, true);
  Ranks ranks(kv, 0);
  auto a = fake_request("a", 10), other = fake_request("o", 4, 500);
  prefill(kv, *a);
  prefill(kv, *other);
  ranks.sync();
  const BlockTable& t = kv.block_table("a");
  Step s;
  s.block_tables = kv.block_ids("a");
  s.slot_mapping = {t.slot(8, 4), t.slot(9, 4)};
  s.handles = {ranks.root.handle("a")};
  EXPECT_FALSE(ranks.worker.check_step(s.view(), s.handles, 4, {}));
  const int32_t foreign = kv.block_ids("o")[0];
  Step bad_slot = s;
  bad_slot.slot_mapping[1] = int64_t{foreign} * 4 + 1;
  const auto err = ranks.worker.check_step(bad_slot.view(), s.handles, 4, {});
  ASSERT_TRUE(err);
  const std::string expected = "request #" + std::to_string(s.handles[0]) + " writes position 9 to slot " +
                               std::to_string(foreign * 4 + 1) + " (block " + std::to_string(foreign) + ")";
  EXPECT_NE(err->find(expected), std::string::npos) << *err;
  Step bad_table = s;
  bad_table.block_tables[0] = foreign;
  EXPECT_TRUE(ranks.worker.check_step(bad_table.view(), s.handles, 4, {}));
  Step bad_offset = s;
  bad_offset.slot_mapping[0] += 1;  // the right block, the wrong slot in it
  EXPECT_TRUE(ranks.worker.check_step(bad_offset.view(), s.handles, 4, {}));
  const int32_t mine = kv.block_ids("a")[2];
  const std::vector<int32_t> good_copy = {foreign, mine, 2, 0, s.handles[0]};
  const std::vector<int32_t> bad_copy = {mine, foreign, 2, 0, s.handles[0]};
  EXPECT_FALSE(ranks.worker.check_step(s.view(), s.handles, 4, good_copy));
  EXPECT_TRUE(ranks.worker.check_step(s.view(), s.handles, 4, bad_copy));
}

TEST(KvBlockLedger, ApplyRefusesEditsThatCannotBeRight) {
  RankBlockLedgers l(4, 0);
  EXPECT_TRUE(l.apply(std::vector<LedgerEdit>{{0, 0, 0, 4}})) << "a block outside the pool";
  EXPECT_TRUE(l.apply(std::vector<LedgerEdit>{{0, 0, 1, 2}})) << "an entry past the table's end";
  EXPECT_TRUE(l.apply(std::vector<LedgerEdit>{{0, 1, 0, 2}})) << "a local group this rank does not have";
  EXPECT_FALSE(l.apply(std::vector<LedgerEdit>{{0, 0, 0, 2}, {0, 0, 1, 3}}));
  EXPECT_EQ(l.main().num_free_blocks(), 2);
  EXPECT_TRUE(l.apply(std::vector<LedgerEdit>{{0, 0, LedgerEdit::kTruncate, 3}})) << "cut longer than the table";
  EXPECT_FALSE(l.apply(std::vector<LedgerEdit>{{0, 0, LedgerEdit::kTruncate, 0}}));
  EXPECT_EQ(l.main().num_free_blocks(), 4);
  EXPECT_EQ(l.main().num_requests(), 0);
}

}  // namespace
}  // namespace kvik
