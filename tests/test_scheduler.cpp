// Scheduler alone, with fake requests and no model: the token budget split, decodes first, chunked prefill
// lengths, which request is preempted and where it goes back, max_num_seqs.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"

namespace kvik {
namespace {

std::unique_ptr<Request> fake_request(const std::string& id, int64_t len) {
  std::vector<int32_t> prompt(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>(1000 * id.size() + i);
  return std::make_unique<Request>(id, std::move(prompt), SamplingParams{}, std::vector<int32_t>{}, 0);
}

struct Step {
  std::vector<std::pair<std::string, int64_t>> scheduled;  // (id, tokens) in batch order
  std::vector<std::string> preempted;
};

// One step as the engine runs it: schedule, mark computed, and give every request whose prompt (or last
// token) is now computed one new output token, as sampling would.
Step run_step(Scheduler& s) {
  const SchedulerOutput out = s.schedule();
  Step st;
  for (const auto& r : out.scheduled) st.scheduled.emplace_back(r.request->request_id, r.num_scheduled_tokens);
  st.preempted = out.preempted_ids;
  s.update_after_step(out);
  for (const auto& r : out.scheduled)
    if (r.request->num_computed_tokens == r.request->num_tokens()) r.request->append_output_token(7);
  return st;
}

using Batch = std::vector<std::pair<std::string, int64_t>>;

TEST(Scheduler, ChunkedPrefillSplitsTheTokenBudget) {
  KVCacheManager kv(100, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 10;
  Scheduler s(c, kv);
  s.add_request(fake_request("a", 25));
  s.add_request(fake_request("b", 3));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 10}}));  // the budget, chunked
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 10}}));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 5}, {"b", 3}}));  // a's rest, then b takes what is left
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 1}, {"b", 1}}));  // both decode
}

TEST(Scheduler, DecodesComeFirstThenRunningPrefillsThenWaiting) {
  KVCacheManager kv(100, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 8;
  Scheduler s(c, kv);
  s.add_request(fake_request("a", 2));
  run_step(s);  // a prefilled
  s.add_request(fake_request("b", 20));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 1}, {"b", 7}}));
  s.add_request(fake_request("c", 4));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 1}, {"b", 7}})) << "b's prefill goes on before c starts";
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 1}, {"b", 6}, {"c", 1}}));
}

TEST(Scheduler, LongPrefillThresholdCapsOneChunk) {
  KVCacheManager kv(100, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.long_prefill_token_threshold = 6;
  Scheduler s(c, kv);
  s.add_request(fake_request("a", 15));
  s.add_request(fake_request("b", 4));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 6}, {"b", 4}}));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"b", 1}, {"a", 6}}));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"b", 1}, {"a", 3}}));
}

TEST(Scheduler, MaxNumSeqsLimitsTheRunningSet) {
  KVCacheManager kv(100, 4, false);
  SchedulerConfig c;
  c.max_num_seqs = 2;
  Scheduler s(c, kv);
  for (const char* id : {"a", "b", "c"}) s.add_request(fake_request(id, 3));
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"a", 3}, {"b", 3}}));
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);
  s.finish_request("a");
  EXPECT_EQ(run_step(s).scheduled, (Batch{{"b", 1}, {"c", 3}}));
}

TEST(Scheduler, PreemptsTheMostRecentlyAdmittedAndRequeuesItFirst) {
  // 6 blocks of 4. a (8 tokens) and b (8 tokens) take 4 blocks, c (7) takes 2: the pool is full. When a's
  // decode needs a third block, c — admitted last — is preempted and freed (its 2 blocks serve a's and b's
  // decodes) and goes back to the front of the waiting queue, ahead of d; nothing new is admitted that step.
  KVCacheManager kv(6, 4, false);
  SchedulerConfig c;
  Scheduler s(c, kv);
  s.add_request(fake_request("a", 8));
  s.add_request(fake_request("b", 8));
  s.add_request(fake_request("c", 7));
  run_step(s);
  EXPECT_EQ(kv.pool().num_free_blocks(), 0);
  s.add_request(fake_request("d", 2));
  const Step st = run_step(s);
  EXPECT_EQ(st.preempted, std::vector<std::string>{"c"});
  EXPECT_EQ(st.scheduled, (Batch{{"a", 1}, {"b", 1}}));
  ASSERT_EQ(s.num_waiting(), 2);
  EXPECT_EQ(s.waiting()[0]->request_id, "c") << "the preempted request goes back first";
  EXPECT_EQ(s.waiting()[1]->request_id, "d");
  EXPECT_EQ(s.waiting()[0]->status, RequestStatus::kPreempted);
  EXPECT_EQ(s.waiting()[0]->num_computed_tokens, 0) << "recomputed from scratch";
  EXPECT_EQ(s.num_preemptions_total(), 1);
  EXPECT_TRUE(kv.block_table("c").empty());
}

TEST(Scheduler, AbortFreesBlocksAndForgetsTheRequest) {
  KVCacheManager kv(10, 4, false);
  Scheduler s(SchedulerConfig{}, kv);
  s.add_request(fake_request("a", 9));
  run_step(s);
  EXPECT_EQ(kv.pool().num_free_blocks(), 7);
  std::unique_ptr<Request> r = s.abort_request("a");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(kv.pool().num_free_blocks(), 10);
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.abort_request("a"), nullptr);
}

}  // namespace
}  // namespace kvik
