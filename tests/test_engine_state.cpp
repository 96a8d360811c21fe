// The dashboard's engine state (GET /v1/engine/state): the snapshot is the engine's block accounting, published
// between steps without changing any output; work run between steps (the trace endpoint) sees the model alone.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <atomic>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/async_engine.h"
#include "engine/engine_state.h"
#include "engine/step_trace.h"
#include "model/llama.h"
#include "server/engine_routes.h"

using namespace kvik;

namespace {

std::unique_ptr<LlamaModel> stories() { return LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf"); }

EngineConfig small_config() {
  EngineConfig cfg;
  cfg.num_kv_blocks = 64;
  cfg.max_model_len = 128;
  cfg.block_size = 4;
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 32;
  cfg.log_stats = false;
  return cfg;
}

// Prompts sharing a 9-token prefix (two full blocks of 4 shared through the prefix cache), then their own tail.
std::vector<std::vector<int32_t>> shared_prefix_prompts(int n) {
  std::vector<std::vector<int32_t>> ps;
  std::mt19937 rng(7);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {1, 400, 401, 402, 403, 404, 405, 406, 407};
    for (int j = 0; j < 5 + i; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    ps.push_back(p);
  }
  return ps;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = max_tokens;
  return sp;
}

// Every running request's block table, the owners, ref counts and hashes equal the engine's own accounting.
void expect_snapshot_matches(const EngineStateSnapshot& s, const EngineCore& e) {
  const KVCacheManager& kv = e.kv_cache_manager();
  const BlockPool& pool = kv.pool();
  ASSERT_EQ(s.num_blocks(), pool.num_blocks());
  EXPECT_EQ(s.num_free_blocks, pool.num_free_blocks());
  ASSERT_EQ(static_cast<int64_t>(s.requests.size()), e.scheduler().num_running() + e.scheduler().num_waiting());
  std::vector<int32_t> holders(static_cast<size_t>(s.num_blocks()), 0);
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const auto& r = s.requests[i];
    EXPECT_EQ(r.running, i < static_cast<size_t>(e.scheduler().num_running()));
    if (!r.running) {
      EXPECT_TRUE(r.block_table.empty());
      continue;
    }
    EXPECT_EQ(r.block_table, kv.block_ids(r.id)) << r.id;
    for (int32_t id : r.block_table) {
      ++holders[static_cast<size_t>(id)];
      const int32_t owner = s.owner[static_cast<size_t>(id)];
      ASSERT_GE(owner, 0);
      EXPECT_LE(owner, static_cast<int32_t>(i)) << "the owner is the first running request holding the block";
    }
  }
  for (int32_t b = 0; b < s.num_blocks(); ++b) {
    const KVCacheBlock& blk = pool.block(b);
    EXPECT_EQ(s.ref_cnt[b], blk.ref_cnt) << "block " << b;
    EXPECT_EQ(s.ref_cnt[b], holders[b]) << "block " << b;
    EXPECT_EQ(s.owner[b] >= 0, holders[b] > 0) << "block " << b;
    ASSERT_EQ(s.has_hash[b] != 0, blk.block_hash.has_value()) << "block " << b;
    if (blk.block_hash) EXPECT_EQ(s.hash[b], *blk.block_hash) << "block " << b;
  }
}

}  // namespace

TEST(EngineState, SnapshotIsTheBlockAccountingAtEveryStep) {
  auto m = stories();
  EngineCore e(*m, small_config(), {2});
  const auto prompts = shared_prefix_prompts(6);
  for (size_t i = 0; i < prompts.size(); ++i)
    ASSERT_FALSE(e.add_request("r" + std::to_string(i), prompts[i], greedy(12)));
  int64_t steps = 0, shared_seen = 0, waiting_seen = 0;
  while (e.has_unfinished()) {
    e.step();
    const EngineStateSnapshot s = take_state_snapshot(e, ++steps);
    expect_snapshot_matches(s, e);
    for (int32_t rc : s.ref_cnt) shared_seen += rc > 1;
    for (const auto& r : s.requests) waiting_seen += !r.running;
    ASSERT_LT(steps, 1000);
  }
  EXPECT_GT(shared_seen, 0) << "the shared prefix's blocks are held by several requests";
  EXPECT_GT(waiting_seen, 0) << "the token budget keeps some requests waiting at first";
  // Idle: nothing held, and the finished prompts' full blocks stay as cached-and-free.
  const EngineStateSnapshot idle = take_state_snapshot(e, steps);
  expect_snapshot_matches(idle, e);
  EXPECT_TRUE(idle.requests.empty());
  int64_t cached_free = 0;
  for (int32_t b = 0; b < idle.num_blocks(); ++b) cached_free += idle.ref_cnt[b] == 0 && idle.has_hash[b];
  EXPECT_GT(cached_free, 0);
  EXPECT_EQ(idle.kv_usage, 0.0);
}

TEST(EngineState, PollingTheSnapshotChangesNoOutput) {
  // The same requests through AsyncEngine with and without a thread asking for a fresh snapshot all the time:
  // the outputs are token for token the same, and the snapshots come at step boundaries, counting up.
  auto m = stories();
  const auto prompts = shared_prefix_prompts(8);
  auto run = [&](bool poll) {
    EngineCore core(*m, small_config(), {2});
    AsyncEngine engine(core);
    std::atomic<bool> done{false};
    std::vector<uint64_t> seen;
    std::thread poller([&] {
      while (poll && !done) {
        if (auto s = engine.state_snapshot(std::chrono::milliseconds(0))) {
          if (seen.empty() || seen.back() != s->sequence) seen.push_back(s->sequence);
          EXPECT_EQ(s->num_blocks(), 64);
        }
        std::this_thread::yield();
      }
    });
    std::vector<std::shared_ptr<OutputQueue>> queues;
    for (size_t i = 0; i < prompts.size(); ++i) {
      queues.push_back(std::make_shared<OutputQueue>());
      EXPECT_FALSE(engine.add_request("r" + std::to_string(i), prompts[i], greedy(64), queues.back()));
    }
    std::map<size_t, std::vector<int32_t>> out;
    for (size_t i = 0; i < queues.size(); ++i)
      for (;;) {
        auto o = queues[i]->pop(std::chrono::seconds(60));
        if (!o) {
          ADD_FAILURE() << "no output";
          break;
        }
        out[i].insert(out[i].end(), o->new_token_ids.begin(), o->new_token_ids.end());
        if (o->finished) break;
      }
    done = true;
    poller.join();
    for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i], seen[i - 1]);
    if (poll) EXPECT_GT(seen.size(), 2u) << "the poller saw fresh snapshots while the requests ran";
    return out;
  };
  const auto plain = run(false);
  const auto polled = run(true);
  EXPECT_EQ(plain, polled);
  for (const auto& [i, tokens] : plain) EXPECT_EQ(tokens.size(), 64u) << i;
}

TEST(EngineState, AskingAnIdleEngineGetsAnExactSnapshot) {
  auto m = stories();
  EngineCore core(*m, small_config(), {2});
  AsyncEngine engine(core);
  auto q = std::make_shared<OutputQueue>();
  ASSERT_FALSE(engine.add_request("a", shared_prefix_prompts(1)[0], greedy(4), q));
  for (;;) {
    auto o = q->pop(std::chrono::seconds(60));
    ASSERT_TRUE(o);
    if (o->finished) break;
  }
  std::shared_ptr<const EngineStateSnapshot> s;
  EXPECT_EQ(engine.state_snapshot(std::chrono::hours(1))->num_steps, 0) << "nobody asked since the start";
  for (int i = 0; i < 500; ++i) {  // asking wakes the idle engine, which publishes a fresh one
    s = engine.state_snapshot(std::chrono::milliseconds(0));
    if (s && s->requests.empty() && s->num_steps > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->requests.empty());
  EXPECT_EQ(s->num_free_blocks, 64);
  EXPECT_GT(s->prefix_cache.queries, 0);
}

TEST(StepTrace, ShapesAreTheModelsAndTheRunMatchesTheEngineThread) {
  auto m = stories();
  const ModelConfig& c = m->config();
  const std::vector<int32_t> ids = {1, 400, 401, 402, 403};
  const StepTrace prefill = trace_step(*m, ids, false);
  EXPECT_EQ(prefill.T, 5);
  EXPECT_EQ(prefill.ctx, 5);
  EXPECT_EQ(prefill.slot_mapping, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  ASSERT_EQ(prefill.stream_rms.size(), static_cast<size_t>(c.n_layers + 1));
  for (double r : prefill.stream_rms) EXPECT_GT(r, 0);
  std::map<std::string, std::vector<int64_t>> dims;
  for (const StepTraceRow& r : prefill.rows) dims[r.code] = r.dims;
  EXPECT_EQ(dims["q = h @ W_q[l] -> heads"], (std::vector<int64_t>{c.n_heads, 5, c.head_dim}));
  EXPECT_EQ(dims["S = q @ K^T / sqrt(d_h) + mask"], (std::vector<int64_t>{c.n_heads, 5, 5}));
  EXPECT_EQ(dims["logits = h @ W_U"], (std::vector<int64_t>{c.vocab_size}));

  const StepTrace decode = trace_step(*m, ids, true);
  EXPECT_EQ(decode.T, 1);
  EXPECT_EQ(decode.ctx, 5);
  EXPECT_EQ(decode.token_ids, (std::vector<int32_t>{403}));
  EXPECT_EQ(decode.slot_mapping, (std::vector<int64_t>{4}));
  // The decode of the last token on a cache of the rest predicts what the whole prefill predicts.
  EXPECT_EQ(decode.next_token, prefill.next_token);
  EXPECT_NEAR(decode.next_prob, prefill.next_prob, 1e-4);
  EXPECT_THROW(trace_step(*m, {1}, true), Error);

  // Through the engine thread, between the steps of a running request: the same table, and the request's
  // output is unchanged.
  EngineCore core(*m, small_config(), {2});
  AsyncEngine engine(core);
  auto q = std::make_shared<OutputQueue>();
  ASSERT_FALSE(engine.add_request("a", shared_prefix_prompts(1)[0], greedy(24), q));
  std::promise<StepTrace> result;
  ASSERT_TRUE(engine.run_between_steps([&](EngineCore& e) { result.set_value(trace_step(e.model(), ids, false)); }));
  const StepTrace t = result.get_future().get();
  EXPECT_EQ(t.next_token, prefill.next_token);
  EXPECT_EQ(t.stream_rms, prefill.stream_rms);
  std::vector<int32_t> tokens;
  for (;;) {
    auto o = q->pop(std::chrono::seconds(60));
    ASSERT_TRUE(o);
    tokens.insert(tokens.end(), o->new_token_ids.begin(), o->new_token_ids.end());
    if (o->finished) break;
  }
  EngineCore alone(*m, small_config(), {2});
  ASSERT_FALSE(alone.add_request("a", shared_prefix_prompts(1)[0], greedy(24)));
  std::vector<int32_t> expected;
  while (alone.has_unfinished())
    for (auto& o : alone.step()) expected.insert(expected.end(), o.new_token_ids.begin(), o.new_token_ids.end());
  EXPECT_EQ(tokens, expected);
}

TEST(EngineStateJson, TheEndpointsJsonCarriesTheSnapshot) {
  auto m = stories();
  EngineCore e(*m, small_config(), {2});
  const auto prompts = shared_prefix_prompts(3);
  for (size_t i = 0; i < prompts.size(); ++i)
    ASSERT_FALSE(e.add_request(i == 2 ? "odd \"id\"\n" : "r" + std::to_string(i), prompts[i], greedy(8)));
  for (int i = 0; i < 3; ++i) e.step();
  EngineStateSnapshot s = take_state_snapshot(e, 3);
  s.sequence = 7;
  const nlohmann::json j = nlohmann::json::parse(server::engine_state_json(s, false));
  EXPECT_EQ(j["object"], "engine.state");
  EXPECT_EQ(j["sequence"], 7);
  EXPECT_EQ(j["num_blocks"], 64);
  EXPECT_EQ(j["block_size"], 4);
  EXPECT_TRUE(j["spec_decode"].is_null());
  ASSERT_EQ(j["blocks"]["owner"].size(), 64u);
  ASSERT_EQ(j["requests"].size(), s.requests.size());
  for (int32_t b = 0; b < 64; ++b) {
    EXPECT_EQ(j["blocks"]["owner"][b], s.owner[b]);
    EXPECT_EQ(j["blocks"]["ref_cnt"][b], s.ref_cnt[b]);
    if (s.has_hash[b])
      EXPECT_EQ(j["blocks"]["hash"][b], fmt::format("{:016x}", s.hash[b].lo));
    else
      EXPECT_TRUE(j["blocks"]["hash"][b].is_null());
  }
  for (size_t i = 0; i < s.requests.size(); ++i) {
    EXPECT_EQ(j["requests"][i]["id"], s.requests[i].id);  // escaped, whatever the id holds
    EXPECT_EQ(j["requests"][i]["status"], s.requests[i].running ? "running" : "waiting");
    EXPECT_EQ(j["requests"][i]["block_table"].get<std::vector<int32_t>>(), s.requests[i].block_table);
  }
  EXPECT_TRUE(nlohmann::json::parse(server::engine_state_json(s, true))["spec_decode"].is_object());
}
