// The `kvik bench` load generator (engine/bench_load.h) as a library: its workload, its concurrency limit, and
// the figures it reports, on stories260K.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/bench_load.h"
#include "model/llama.h"

namespace kvik {
namespace {

EngineConfig small_engine() {
  EngineConfig c;
  c.max_model_len = 128;
  c.block_size = 16;
  c.num_kv_blocks = 64;
  c.log_stats = false;
  return c;
}

TEST(BenchLoad, WorkloadIsSeededWithASharedPrefixAndPoissonArrivals) {
  BenchLoadOptions o;
  o.num_prompts = 8;
  o.input_len = 40;
  o.shared_prefix_len = 20;
  o.request_rate = 50;
  o.seed = 5;
  const BenchWorkload a = bench_workload(o, 512), b = bench_workload(o, 512);
  EXPECT_EQ(a.prompts, b.prompts);
  EXPECT_EQ(a.arrival_s, b.arrival_s);
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    ASSERT_EQ(a.prompts[i].size(), 40u);
    EXPECT_EQ(a.prompts[i][0], 1);  // BOS
    for (int32_t t : a.prompts[i]) EXPECT_TRUE(t == 1 || (t >= 3 && t < 512));
    EXPECT_TRUE(std::equal(a.prompts[i].begin(), a.prompts[i].begin() + 21, a.prompts[0].begin()));
    if (i > 0) {
      EXPECT_NE(a.prompts[i], a.prompts[0]);
      EXPECT_GT(a.arrival_s[i], a.arrival_s[i - 1]);
    }
  }
  o.seed = 6;
  EXPECT_NE(bench_workload(o, 512).prompts, a.prompts);
  o.request_rate = 0;
  for (double t : bench_workload(o, 512).arrival_s) EXPECT_EQ(t, 0.0);  // all at once
}

TEST(BenchLoad, RunsEveryRequestToItsLengthWithinTheConcurrencyLimit) {
  auto model = LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  EngineCore engine(*model, small_engine(), {});
  BenchLoadOptions o;
  o.num_prompts = 6;
  o.input_len = 40;
  o.output_len = 5;
  o.shared_prefix_len = 32;
  o.concurrency = 2;
  o.seed = 3;
  const BenchLoadResult r = run_bench_load(engine, model->config().vocab_size, o);
  EXPECT_EQ(r.requests, 6);
  EXPECT_EQ(r.input_tokens, 6 * 40);
  EXPECT_EQ(r.output_tokens, 6 * 5);
  EXPECT_EQ(r.ttft_s.size(), 6u);
  EXPECT_EQ(r.itl_s.size(), 6u * 4);
  EXPECT_EQ(r.max_in_flight, 2);
  EXPECT_GT(r.duration_s, 0);
  EXPECT_GT(r.kv_usage_peak, 0);
  EXPECT_EQ(r.preemptions, 0);
  // The 33 shared tokens (BOS + 32) are two full blocks: every request after the first two finds them cached.
  EXPECT_EQ(r.prefix_queries, 6 * 40);
  EXPECT_GE(r.prefix_hits, 4 * 32);
  EXPECT_LE(r.prefix_hits, 5 * 32);
  EXPECT_FALSE(engine.has_unfinished());
  // A second run on the same engine reports its own figures, not the engine's totals.
  o.num_prompts = 1;
  o.concurrency = 0;
  const BenchLoadResult r2 = run_bench_load(engine, model->config().vocab_size, o);
  EXPECT_EQ(r2.output_tokens, 5);
  EXPECT_EQ(r2.prefix_queries, 40);
}

TEST(BenchLoad, RefusesOptionsThatDoNotFit) {
  auto model = LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  EngineCore engine(*model, small_engine(), {});
  BenchLoadOptions o;
  o.input_len = 100;
  o.output_len = 100;  // 200 > max_model_len 128
  EXPECT_THROW(run_bench_load(engine, 512, o), Error);
  o.output_len = 4;
  o.shared_prefix_len = 100;
  EXPECT_THROW(validate_bench_options(o), Error);
  o.shared_prefix_len = 0;
  o.num_prompts = 0;
  EXPECT_THROW(validate_bench_options(o), Error);
  o.num_prompts = 1;
  o.request_rate = -1;
  EXPECT_THROW(validate_bench_options(o), Error);
}

TEST(BenchLoad, PercentileInterpolatesBetweenRanks) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 99), 19.9);
}

}  // namespace
}  // namespace kvik
