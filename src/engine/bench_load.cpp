#include "engine/bench_load.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>

#include "core/error.h"

namespace kvik {

namespace {}  // namespace

void validate_bench_options(const BenchLoadOptions& o) {
  if (o.num_prompts <= 0 || o.input_len <= 0 || o.output_len <= 0)
    fail("--num-prompts, --input-len and --output-len must be positive");
  if (o.shared_prefix_len < 0 || o.shared_prefix_len >= o.input_len)
    fail("--shared-prefix-len must be in [0, --input-len)");
  if (o.concurrency < 0) fail("--concurrency must not be negative");
  if (!(o.request_rate >= 0) || std::isinf(o.request_rate)) fail("--request-rate must be a finite number >= 0");
}

namespace {

// The bookkeeping of one run: who was sent when, each request's last token, the measurements.
struct LoadState {
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0 = Clock::now();
  std::vector<double> sent, last_token, first_token;
  std::vector<int64_t> num_tokens;
  int32_t next = 0, in_flight = 0, done = 0;
  BenchLoadResult result;

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  void record(const std::vector<RequestOutput>& outs) {
    const double t = elapsed();
    for (const auto& out : outs) {
      const int i = std::stoi(out.request_id);
      for (size_t k = 0; k < out.new_token_ids.size(); ++k) {
        if (last_token[i] < 0) {
          result.ttft_s.push_back(t - sent[i]);
          first_token[i] = t;
        } else
          result.itl_s.push_back(t - last_token[i]);
        last_token[i] = t;
        ++num_tokens[i];
        ++result.output_tokens;
      }
      if (out.finished) {
        ++done, --in_flight;
        if (num_tokens[i] > 1 && last_token[i] > first_token[i])
          result.decode_tok_s.push_back(static_cast<double>(num_tokens[i] - 1) / (last_token[i] - first_token[i]));
      }
    }
  }
};

}  // namespace

BenchWorkload bench_workload(const BenchLoadOptions& o, int64_t vocab_size) {
  validate_bench_options(o);
  std::mt19937_64 rng(o.seed);
  const auto random_token = [&] {
    return static_cast<int32_t>(3 + rng() % static_cast<uint64_t>(std::max<int64_t>(1, vocab_size - 3)));
  };
  std::vector<int32_t> prefix = {1};
  while (static_cast<int>(prefix.size()) < o.shared_prefix_len + 1) prefix.push_back(random_token());
  BenchWorkload w;
  w.prompts.resize(o.num_prompts);
  w.arrival_s.assign(o.num_prompts, 0.0);
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  double t = 0;
  for (int32_t i = 0; i < o.num_prompts; ++i) {
    std::vector<int32_t>& p = w.prompts[i];
    p = o.shared_prefix_len > 0 ? prefix : std::vector<int32_t>{1};
    while (static_cast<int>(p.size()) < o.input_len) p.push_back(random_token());
    if (o.request_rate > 0) t += gap(rng);
    w.arrival_s[i] = t;
  }
  return w;
}

BenchLoadResult run_bench_load(EngineCore& engine, int64_t vocab_size, const BenchLoadOptions& o) {
  const BenchWorkload w = bench_workload(o, vocab_size);
  if (o.input_len + o.output_len > engine.config().max_model_len)
    fail("--input-len + --output-len = {} exceeds max_model_len {}", o.input_len + o.output_len,
         engine.config().max_model_len);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = o.output_len;
  sp.ignore_eos = true;

  const PrefixCacheStats pc0 = engine.kv_cache_manager().prefix_cache_stats();
  const int64_t preemptions0 = engine.scheduler().num_preemptions_total();
  LoadState s;
  s.sent.assign(o.num_prompts, 0);
  s.last_token.assign(o.num_prompts, -1);
  s.first_token.assign(o.num_prompts, -1);
  s.num_tokens.assign(o.num_prompts, 0);
  const SpecDecodeStats spec0 = engine.spec_decode_stats();
  const int32_t limit = o.concurrency > 0 ? o.concurrency : o.num_prompts;
  while (s.done < o.num_prompts) {
    while (s.next < o.num_prompts && w.arrival_s[s.next] <= s.elapsed() && s.in_flight < limit) {
      if (!o.loras.empty()) sp.lora = o.loras[s.next % o.loras.size()];
      if (auto err = engine.add_request(std::to_string(s.next), w.prompts[s.next], sp)) fail("{}", err->message);
      s.sent[s.next] = s.elapsed();
      ++s.next, ++s.in_flight;
      s.result.max_in_flight = std::max(s.result.max_in_flight, s.in_flight);
    }
    if (!engine.has_unfinished()) {
      if (s.next < o.num_prompts)
        std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, w.arrival_s[s.next] - s.elapsed())));
      continue;
    }
    s.record(engine.step());
    s.result.kv_usage_peak = std::max(s.result.kv_usage_peak, engine.kv_cache_manager().usage());
  }
  BenchLoadResult& r = s.result;
  r.duration_s = s.elapsed();
  r.requests = o.num_prompts;
  r.input_tokens = static_cast<int64_t>(o.num_prompts) * o.input_len;
  r.prefix_queries = engine.kv_cache_manager().prefix_cache_stats().queries - pc0.queries;
  r.prefix_hits = engine.kv_cache_manager().prefix_cache_stats().hits - pc0.hits;
  r.preemptions = engine.scheduler().num_preemptions_total() - preemptions0;
  const SpecDecodeStats& spec = engine.spec_decode_stats();
  r.spec.num_drafts = spec.num_drafts - spec0.num_drafts;
  r.spec.num_draft_tokens = spec.num_draft_tokens - spec0.num_draft_tokens;
  r.spec.num_accepted_tokens = spec.num_accepted_tokens - spec0.num_accepted_tokens;
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

}  // namespace kvik
