// kvik bench: an offline load generator through EngineCore (engine/bench_load.h): requests of random token ids
// arrive at --request-rate (Poisson; default all at once), at most --concurrency in flight; it reports
// throughput, TTFT and inter-token latency percentiles, prefix-cache hit rate, preemptions and peak KV usage,
// and the decode roofline of this machine's memory bandwidth.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "engine/bench_load.h"
#include "engine/engine_core.h"
#include "engine/parallel_engine.h"
#include "kernels/cpu/memory_bandwidth.h"

namespace kvik::cli {
namespace {

struct BenchOpts {
  std::string model;
  BenchLoadOptions load;
  bool json = false, bandwidth = true;
  EngineFlags engine;
  std::vector<std::string> loras;  // --lora PATH ...: requests spread over them round-robin
};

// The probe's patterns as JSON, and the better of two probes (before and after the load) pattern by pattern.
nlohmann::json probe_json(const MemoryProbe& p) {
  nlohmann::json patterns = nlohmann::json::array();
  for (const MemoryPattern& m : p.patterns)
    patterns.push_back({{"pattern", m.name}, {"threads", m.threads}, {"gbs", m.gbs}});
  return {{"buffer_bytes", p.buffer_bytes},
          {"best_gbs", p.best_gbs},
          {"one_thread_gbs", p.one_thread_gbs},
          {"patterns", patterns}};
}
MemoryProbe better(MemoryProbe a, const MemoryProbe& b) {
  for (size_t i = 0; i < a.patterns.size() && i < b.patterns.size(); ++i)
    a.patterns[i].gbs = std::max(a.patterns[i].gbs, b.patterns[i].gbs);
  a.best_gbs = std::max(a.best_gbs, b.best_gbs), a.one_thread_gbs = std::max(a.one_thread_gbs, b.one_thread_gbs);
  return a;
}

// The run's figures as one JSON object; the probe (empty: not measured) gives the batch-1 decode roofline: every
// weight is read once per token (the embedding table only one row of). The roofline's bandwidth is the probe's best,
// or what decode itself streamed when that is more (the probe then under-reads this machine: roofline_basis says
// which), so the fraction never exceeds 1.
nlohmann::json report(const BenchOpts& o, const BenchLoadResult& r, const LlamaModel& model, const MemoryProbe& probe) {
  const int64_t bytes_per_token = model.decode_bytes_per_token();
  const double itl_p50 = percentile(r.itl_s, 50);
  const double decode_tok_s = itl_p50 > 0 ? 1.0 / itl_p50 : 0.0;
  const double decode_gbs = decode_tok_s * static_cast<double>(bytes_per_token) / 1e9;
  const bool probed = probe.best_gbs > 0;
  const double bandwidth = probed ? std::max(probe.best_gbs, decode_gbs) : 0.0;
  const double roofline = bandwidth > 0 ? bandwidth * 1e9 / static_cast<double>(bytes_per_token) : 0.0;
  return {
      {"requests", r.requests},
      {"duration_s", r.duration_s},
      {"output_tok_s", static_cast<double>(r.output_tokens) / r.duration_s},
      {"total_tok_s", static_cast<double>(r.output_tokens + r.input_tokens) / r.duration_s},
      {"ttft_ms", {{"p50", percentile(r.ttft_s, 50) * 1000}, {"p99", percentile(r.ttft_s, 99) * 1000}}},
      {"itl_ms", {{"p50", itl_p50 * 1000}, {"p99", percentile(r.itl_s, 99) * 1000}}},
      {"prefix_cache_hit_rate",
       r.prefix_queries > 0 ? static_cast<double>(r.prefix_hits) / static_cast<double>(r.prefix_queries) : 0.0},
      {"preemptions", r.preemptions},
      {"kv_usage_peak", r.kv_usage_peak},
      {"model_bytes", model.weight_bytes()},
      {"bytes_read_per_token", bytes_per_token},
      {"memory_bandwidth_gbs", bandwidth},
      {"memory_probe", probed ? probe_json(probe) : nlohmann::json(nullptr)},
      {"roofline_basis", !probed                       ? "none"
                         : decode_gbs > probe.best_gbs ? "decode"
                                                       : "probe"},
      {"decode_gbs", decode_gbs},  // weight bytes per token × decode tok/s: what decode streamed
      {"decode_roofline_tok_s", roofline},
      {"decode_tok_s", decode_tok_s},  // 1 / median inter-token latency: batch-1 decode at --concurrency 1
      {"roofline_fraction", roofline > 0 ? decode_tok_s / roofline : 0.0},
      {"concurrency", o.load.concurrency},
      {"input_len", o.load.input_len},
      {"output_len", o.load.output_len},
      {"request_decode_tok_s", percentile(r.decode_tok_s, 50)},  // median of each request's own decode rate
      {"spec_acceptance_rate", r.spec.acceptance_rate()},
      {"spec_mean_accepted_len", r.spec.mean_accepted_len()},
      {"spec_num_drafts", r.spec.num_drafts},
  };
}

void print_text(const nlohmann::json& j) {
  std::printf("requests %d in %.2f s: %.1f output tok/s, %.1f total tok/s\n", j["requests"].get<int>(),
              j["duration_s"].get<double>(), j["output_tok_s"].get<double>(), j["total_tok_s"].get<double>());
  std::printf("TTFT p50 %.1f ms p99 %.1f ms; ITL p50 %.2f ms p99 %.2f ms\n", j["ttft_ms"]["p50"].get<double>(),
              j["ttft_ms"]["p99"].get<double>(), j["itl_ms"]["p50"].get<double>(), j["itl_ms"]["p99"].get<double>());
  const double roofline = j["decode_roofline_tok_s"].get<double>();
  if (roofline > 0) {
    std::printf("memory probe (%.0f MiB):", j["memory_probe"]["buffer_bytes"].get<double>() / 1048576.0);
    for (const auto& p : j["memory_probe"]["patterns"])
      std::printf(" %s×%d %.1f", p["pattern"].get<std::string>().c_str(), p["threads"].get<int>(),
                  p["gbs"].get<double>());
    std::printf(" GB/s\n");
    std::printf(
        "memory bandwidth %.1f GB/s (%s), %.1f MB read per token: decode roofline %.1f tok/s; "
        "decode at the median ITL %.1f tok/s (%.1f GB/s) = %.0f%% of it\n",
        j["memory_bandwidth_gbs"].get<double>(),
        j["roofline_basis"] == "decode" ? "what decode streamed: the probe read less" : "the probe's best",
        j["bytes_read_per_token"].get<double>() / 1e6, roofline, j["decode_tok_s"].get<double>(),
        j["decode_gbs"].get<double>(), 100 * j["roofline_fraction"].get<double>());
  }
  if (j["spec_num_drafts"].get<int64_t>() > 0)
    std::printf(
        "speculative decoding: acceptance rate %.1f%%, mean acceptance length %.2f; per-request decode %.1f tok/s\n",
        100 * j["spec_acceptance_rate"].get<double>(), j["spec_mean_accepted_len"].get<double>(),
        j["request_decode_tok_s"].get<double>());
  std::printf("prefix cache hit rate %.1f%%, preemptions %lld, peak KV usage %.1f%%\n",
              100 * j["prefix_cache_hit_rate"].get<double>(), j["preemptions"].get<long long>(),
              100 * j["kv_usage_peak"].get<double>());
}

int run(const BenchOpts& o) {
  validate_bench_options(o.load);
  EngineConfig cfg = o.engine.resolve();
  if (auto rc = run_parallel_worker(o.model, cfg)) return *rc;  // ranks > 0 of mpirun
  auto model = load_model(o.model, cfg);
  BenchLoadOptions load = o.load;
  for (const std::string& p : o.loras) load.loras.push_back(load_lora_adapter(p, model->config()));
  cfg.max_loras = std::max<int64_t>(1, static_cast<int64_t>(load.loras.size()));  // all adapters in one step
  EngineCore engine(*model, cfg, {});  // no EOS: every request produces exactly --output-len tokens
  // The bandwidth of this (often shared) machine drifts; the probe runs before and after the load and the higher
  // figure counts, so the roofline fraction errs on the low side.
  const MemoryProbe before = o.bandwidth ? probe_memory_bandwidth() : MemoryProbe{};
  const BenchLoadResult r = run_bench_load(engine, model->config().vocab_size, load);
  const MemoryProbe probe = o.bandwidth ? better(before, probe_memory_bandwidth()) : MemoryProbe{};
  const nlohmann::json j = report(o, r, *model, probe);
  if (o.json)
    std::printf("%s\n", j.dump().c_str());
  else
    print_text(j);
  return 0;
}

}  // namespace

Run add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOpts>();
  BenchLoadOptions& l = o->load;
  auto* c = app.add_subcommand("bench", "Offline load generator through the engine: throughput, TTFT, ITL");
  c->add_option("--model,-m", o->model, "GGUF model file")->required();
  c->add_option("--num-prompts", l.num_prompts, "Requests to send")->capture_default_str();
  c->add_option("--input-len", l.input_len, "Prompt tokens per request (BOS included)")->capture_default_str();
  c->add_option("--output-len", l.output_len, "Generated tokens per request (EOS ignored)")->capture_default_str();
  c->add_option("--concurrency", l.concurrency, "Max requests in flight (0 = no limit)")->capture_default_str();
  c->add_option("--request-rate", l.request_rate, "Poisson arrival rate in requests/s (0 = all at once)")
      ->capture_default_str();
  c->add_option("--shared-prefix-len", l.shared_prefix_len, "Leading prompt tokens shared by every request")
      ->capture_default_str();
  c->add_option("--seed", l.seed, "Seed for prompts and arrivals")->capture_default_str();
  c->add_option("--lora", o->loras, "LoRA adapters (PEFT directory or GGUF) the requests spread over round-robin")
      ->expected(1, -1);
  c->add_flag("--json", o->json, "Print one JSON object");
  c->add_flag("!--no-bandwidth", o->bandwidth, "Skip the memory-bandwidth test (and the decode roofline)");
  add_engine_flags(c, o->engine);
  return [o]() { return run(*o); };
}

}  // namespace kvik::cli
