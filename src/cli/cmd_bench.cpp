// kvik bench: an offline load generator through EngineCore (vLLM's benchmark_throughput/serving, in process).
// Requests of random token ids arrive at --request-rate (Poisson; default all at once), at most
// --concurrency in flight; it reports throughput, TTFT and inter-token latency percentiles, prefix-cache
// hit rate, preemptions and peak KV usage.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "kernels/cpu/memory_bandwidth.h"

namespace kvik::cli {
namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

}  // namespace

Run add_bench(CLI::App& app) {
  struct Opts {
    std::string model;
    int num_prompts = 64, input_len = 128, output_len = 64, concurrency = 0, shared_prefix_len = 0;
    double request_rate = 0;  // 0 = all at once
    uint64_t seed = 0;
    bool json = false, bandwidth = true;
    EngineFlags engine;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("bench", "Offline load generator through the engine: throughput, TTFT, ITL");
  c->add_option("--model,-m", o->model, "GGUF model file")->required();
  c->add_option("--num-prompts", o->num_prompts, "Requests to send")->capture_default_str();
  c->add_option("--input-len", o->input_len, "Prompt tokens per request (BOS included)")->capture_default_str();
  c->add_option("--output-len", o->output_len, "Generated tokens per request (EOS ignored)")->capture_default_str();
  c->add_option("--concurrency", o->concurrency, "Max requests in flight (0 = no limit)")->capture_default_str();
  c->add_option("--request-rate", o->request_rate, "Poisson arrival rate in requests/s (0 = all at once)")
      ->capture_default_str();
  c->add_option("--shared-prefix-len", o->shared_prefix_len, "Leading prompt tokens shared by every request")
      ->capture_default_str();
  c->add_option("--seed", o->seed, "Seed for prompts and arrivals")->capture_default_str();
  c->add_flag("--json", o->json, "Print one JSON object");
  c->add_flag("!--no-bandwidth", o->bandwidth, "Skip the memory-bandwidth test (and the decode roofline)");
  add_engine_flags(c, o->engine);
  return [o]() {
    if (o->num_prompts <= 0 || o->input_len <= 0 || o->output_len <= 0)
      fail("--num-prompts, --input-len and --output-len must be positive");
    if (o->shared_prefix_len < 0 || o->shared_prefix_len >= o->input_len)
      fail("--shared-prefix-len must be in [0, --input-len)");
    EngineConfig cfg = o->engine.resolve();
    auto model = LlamaModel::load(o->model);
    EngineCore engine(*model, cfg, {});  // no EOS: every request produces exactly --output-len tokens
    // The bandwidth of this (often shared) machine drifts; the probe runs before and after the load and the higher
    // figure counts, so the roofline fraction errs on the low side.
    const double bandwidth_before = o->bandwidth ? measure_memory_bandwidth_gbs() : 0.0;
    const int64_t V = model->config().vocab_size;
    if (o->input_len + o->output_len > engine.config().max_model_len)
      fail("--input-len + --output-len = {} exceeds max_model_len {}", o->input_len + o->output_len,
           engine.config().max_model_len);

    std::mt19937_64 rng(o->seed);
    auto random_token = [&] { return static_cast<int32_t>(3 + rng() % static_cast<uint64_t>(std::max<int64_t>(1, V - 3))); };
    std::vector<int32_t> prefix = {1};
    while (static_cast<int>(prefix.size()) < o->shared_prefix_len + 1) prefix.push_back(random_token());
    std::vector<std::vector<int32_t>> prompts(o->num_prompts);
    std::vector<double> arrival(o->num_prompts, 0.0);
    double t_arr = 0;
    std::exponential_distribution<double> gap(o->request_rate > 0 ? o->request_rate : 1.0);
    for (int i = 0; i < o->num_prompts; ++i) {
      prompts[i] = o->shared_prefix_len > 0 ? prefix : std::vector<int32_t>{1};
      while (static_cast<int>(prompts[i].size()) < o->input_len) prompts[i].push_back(random_token());
      if (o->request_rate > 0) t_arr += gap(rng);
      arrival[i] = t_arr;
    }
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = o->output_len;
    sp.ignore_eos = true;

    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
    std::vector<double> sent(o->num_prompts, 0), last_token(o->num_prompts, -1), ttft, itl;
    int next = 0, in_flight = 0, done = 0;
    int64_t out_tokens = 0;
    double kv_peak = 0;
    const int limit = o->concurrency > 0 ? o->concurrency : o->num_prompts;
    while (done < o->num_prompts) {
      const double now = elapsed();
      while (next < o->num_prompts && arrival[next] <= now && in_flight < limit) {
        if (auto err = engine.add_request(std::to_string(next), prompts[next], sp)) fail("{}", err->message);
        sent[next] = elapsed();
        ++next, ++in_flight;
      }
      if (!engine.has_unfinished()) {
        if (next < o->num_prompts)
          std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, arrival[next] - elapsed())));
        continue;
      }
      auto outs = engine.step();
      kv_peak = std::max(kv_peak, engine.kv_cache_manager().usage());
      const double t = elapsed();
      for (const auto& out : outs) {
        const int i = std::stoi(out.request_id);
        for (size_t k = 0; k < out.new_token_ids.size(); ++k) {
          if (last_token[i] < 0) ttft.push_back(t - sent[i]);
          else itl.push_back(t - last_token[i]);
          last_token[i] = t;
          ++out_tokens;
        }
        if (out.finished) ++done, --in_flight;
      }
    }
    const double duration = elapsed();
    // Batch-1 decode roofline: every weight is read once per token (the embedding table only one row of).
    const int64_t bytes_per_token = model->decode_bytes_per_token();
    const double bandwidth = o->bandwidth ? std::max(bandwidth_before, measure_memory_bandwidth_gbs()) : 0.0;
    const double roofline = bandwidth > 0 ? bandwidth * 1e9 / static_cast<double>(bytes_per_token) : 0.0;
    const double itl_p50 = percentile(itl, 50);
    const double decode_tok_s = itl_p50 > 0 ? 1.0 / itl_p50 : 0.0;
    const auto& pc = engine.kv_cache_manager().prefix_cache_stats();
    nlohmann::json j = {
        {"requests", o->num_prompts},
        {"duration_s", duration},
        {"output_tok_s", static_cast<double>(out_tokens) / duration},
        {"total_tok_s", static_cast<double>(out_tokens + static_cast<int64_t>(o->num_prompts) * o->input_len) / duration},
        {"ttft_ms", {{"p50", percentile(ttft, 50) * 1000}, {"p99", percentile(ttft, 99) * 1000}}},
        {"itl_ms", {{"p50", percentile(itl, 50) * 1000}, {"p99", percentile(itl, 99) * 1000}}},
        {"prefix_cache_hit_rate", pc.queries > 0 ? static_cast<double>(pc.hits) / static_cast<double>(pc.queries) : 0.0},
        {"preemptions", engine.scheduler().num_preemptions_total()},
        {"kv_usage_peak", kv_peak},
        {"model_bytes", model->weight_bytes()},
        {"bytes_read_per_token", bytes_per_token},
        {"memory_bandwidth_gbs", bandwidth},
        {"decode_roofline_tok_s", roofline},
        {"decode_tok_s", decode_tok_s},  // 1 / median inter-token latency: batch-1 decode at --concurrency 1
        {"roofline_fraction", roofline > 0 ? decode_tok_s / roofline : 0.0},
        {"concurrency", o->concurrency},
        {"input_len", o->input_len},
        {"output_len", o->output_len},
    };
    if (o->json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("requests %d in %.2f s: %.1f output tok/s, %.1f total tok/s\n", o->num_prompts, duration,
                  j["output_tok_s"].get<double>(), j["total_tok_s"].get<double>());
      std::printf("TTFT p50 %.1f ms p99 %.1f ms; ITL p50 %.2f ms p99 %.2f ms\n", j["ttft_ms"]["p50"].get<double>(),
                  j["ttft_ms"]["p99"].get<double>(), j["itl_ms"]["p50"].get<double>(), j["itl_ms"]["p99"].get<double>());
      if (roofline > 0)
        std::printf("memory bandwidth %.1f GB/s, %.1f MB read per token: decode roofline %.1f tok/s; "
                    "decode at the median ITL %.1f tok/s = %.0f%% of it\n",
                    bandwidth, bytes_per_token / 1e6, roofline, decode_tok_s, 100 * decode_tok_s / roofline);
      std::printf("prefix cache hit rate %.1f%%, preemptions %lld, peak KV usage %.1f%%\n",
                  100 * j["prefix_cache_hit_rate"].get<double>(), (long long)engine.scheduler().num_preemptions_total(),
                  100 * kv_peak);
    }
    return 0;
  };
}

}  // namespace kvik::cli
