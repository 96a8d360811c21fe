// The load generator behind `kvik bench` (vLLM's benchmark_throughput / benchmark_serving, in process):
// requests of random token ids arrive at a Poisson rate (or all at once), at most `concurrency` in flight,
// each producing exactly output_len tokens (EOS ignored), through one EngineCore. Reports what the serving
// benchmarks report: throughput, TTFT and inter-token latencies, prefix-cache hits, preemptions, peak KV use.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine_core.h"

namespace kvik {

struct BenchLoadOptions {
  int32_t num_prompts = 64;
  int32_t input_len = 128;        // prompt tokens per request, BOS (id 1) included
  int32_t output_len = 64;        // generated tokens per request
  int32_t concurrency = 0;        // most requests in flight, 0 = no limit
  double request_rate = 0;        // Poisson arrivals per second, 0 = all at once
  int32_t shared_prefix_len = 0;  // leading prompt tokens (after BOS) every request shares
  uint64_t seed = 0;              // prompts and arrivals
  // LoRA adapters the requests spread over round-robin (request i: loras[i % size]); empty = the base model only.
  std::vector<std::shared_ptr<const LoraAdapter>> loras;
};

struct BenchLoadResult {
  int32_t requests = 0;
  double duration_s = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  std::vector<double> ttft_s;  // one per request: arrival in the engine → first token
  std::vector<double> itl_s;   // every gap between two tokens of one request
  // Per finished request: (its tokens − 1) / (last token − first token), its own decode rate. Unlike
  // 1 / ITL it stays meaningful when one step gives a request several tokens (speculative decoding).
  std::vector<double> decode_tok_s;
  int64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache during the run
  int64_t prefix_hits = 0;
  int64_t preemptions = 0;    // during the run
  double kv_usage_peak = 0;   // largest fraction of KV blocks in use after a step
  int32_t max_in_flight = 0;  // most requests in the engine at once
  SpecDecodeStats spec;       // speculative decoding during the run (zero when off)
};

// What a run sends: input_len token ids per prompt, BOS first, random ids in [3, vocab_size) after it (the
// first shared_prefix_len of them the same in every prompt), and when each arrives (seconds from the start).
// The same seed gives the same workload. Throws kvik::Error on options out of range.
struct BenchWorkload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<double> arrival_s;
};
void validate_bench_options(const BenchLoadOptions& options);  // throws kvik::Error naming the flag
BenchWorkload bench_workload(const BenchLoadOptions& options, int64_t vocab_size);

// Runs the load through `engine` (idle, built without EOS ids or with ignore_eos in mind: every request asks
// for exactly output_len tokens) and measures it. Throws kvik::Error when the options do not fit the engine.
BenchLoadResult run_bench_load(EngineCore& engine, int64_t vocab_size, const BenchLoadOptions& options);

// The p-th percentile (0..100) of v with linear interpolation between ranks; 0 for an empty v.
double percentile(std::vector<double> v, double p);

}  // namespace kvik
