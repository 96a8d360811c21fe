#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>

namespace kvik::server {

namespace {

// Latency buckets in seconds (vLLM's, trimmed).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kItlBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                         0.15,   0.2,   0.3,    0.4,   0.5,  0.75,  1.0,  2.5,   5.0};
const std::vector<double> kRequestBuckets = {0.001, 0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,  1.5,  2.0,
                                             2.5,   5.0,  10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0};

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string format_value(double v) { return fmt::format("{}", v); }

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, format_value(bounds_[i]), cum);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, format_value(sum_));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + escape_label_value(model_name) + "\""),
      time_to_first_token_(kTtftBuckets),
      inter_token_latency_(kItlBuckets),
      request_queue_time_(kRequestBuckets),
      request_prefill_time_(kRequestBuckets),
      request_decode_time_(kRequestBuckets),
      request_success_{{"stop", 0}, {"length", 0}, {"abort", 0}} {}

void ServerMetrics::enable_lora_info(int64_t max_loras) {
  std::lock_guard<std::mutex> lock(mu_);
  max_loras_ = max_loras;
}

namespace {
// The distinct adapter names of `requests`, sorted, comma-separated.
template <typename Range>
std::string adapter_names(const Range& requests) {
  std::set<std::string> names;
  for (const Request* r : requests)
    if (r->sampling_params.lora) names.insert(r->sampling_params.lora->name);
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}
}  // namespace

void ServerMetrics::on_step(const EngineCore& core, const std::vector<RequestOutput>& outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_loras_ >= 0) {
    running_loras_ = adapter_names(core.scheduler().running());
    waiting_loras_ = adapter_names(core.scheduler().waiting());
    lora_info_time_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  num_requests_running_ = core.scheduler().num_running();
  num_requests_waiting_ = core.scheduler().num_waiting();
  kv_cache_usage_perc_ = core.kv_cache_manager().usage();
  prefix_cache_queries_ = core.kv_cache_manager().prefix_cache_stats().queries;
  prefix_cache_hits_ = core.kv_cache_manager().prefix_cache_stats().hits;
  num_preemptions_ = core.scheduler().num_preemptions_total();
  spec_decode_ = core.spec_decode_stats();
  iteration_tokens_ += core.last_step_tokens();
  for (const RequestOutput& o : outputs) {
    generation_tokens_ += static_cast<int64_t>(o.new_token_ids.size());
    if (!o.finished) continue;
    if (o.index == 0) prompt_tokens_ += o.num_prompt_tokens;  // once per request: n > 1 prefills it once
    ++request_success_[o.finish_reason];
    const RequestStats& s = o.stats;
    if (s.first_scheduled) request_queue_time_.observe(seconds(s.arrival, *s.first_scheduled));
    if (s.first_token) {
      time_to_first_token_.observe(seconds(s.arrival, *s.first_token));
      request_prefill_time_.observe(s.prefill_time_s);
      request_decode_time_.observe(s.decode_time_s);
    }
    for (size_t i = 1; i < s.token_times_s.size(); ++i)
      inter_token_latency_.observe(s.token_times_s[i] - s.token_times_s[i - 1]);
  }
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    h.render(out, name, labels_);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    out += fmt::format("{}{{{}}} {}\n", name, labels_, format_value(v));
  };
  auto counter = [&](const char* name, const char* help, int64_t v) {
    header(out, name, "counter", help);
    out += fmt::format("{}{{{}}} {}\n", name, labels_, v);
  };
  histogram("kvik:time_to_first_token_seconds", "Time to first token (TTFT = queue + prefill), seconds.",
            time_to_first_token_);
  histogram("kvik:inter_token_latency_seconds",
            "Time between consecutive output tokens (ITL ~ one decode step), seconds.", inter_token_latency_);
  histogram("kvik:request_queue_time_seconds", "Time a request spent in the waiting queue, seconds.",
            request_queue_time_);
  histogram("kvik:request_prefill_time_seconds", "Time from first scheduling to first token (prefill), seconds.",
            request_prefill_time_);
  histogram("kvik:request_decode_time_seconds", "Time from first to last token (decode), seconds.",
            request_decode_time_);
  gauge("kvik:num_requests_running", "Requests in the running batch.", static_cast<double>(num_requests_running_));
  gauge("kvik:num_requests_waiting", "Requests in the waiting queue.", static_cast<double>(num_requests_waiting_));
  gauge("kvik:kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).", kv_cache_usage_perc_);
  counter("kvik:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", prefix_cache_queries_);
  counter("kvik:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", prefix_cache_hits_);
  counter("kvik:num_preemptions_total", "Requests preempted because the KV cache ran out of blocks.", num_preemptions_);
  counter("kvik:iteration_tokens_total", "Tokens scheduled over all engine steps.", iteration_tokens_);
  counter("kvik:prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  counter("kvik:generation_tokens_total", "Generated tokens.", generation_tokens_);
  if (!spec_decode_.accepted_per_pos.empty()) {
    counter("kvik:spec_decode_num_drafts_total", "Speculative decoding: verification steps that carried drafts.",
            spec_decode_.num_drafts);
    counter("kvik:spec_decode_num_draft_tokens_total", "Speculative decoding: draft tokens proposed and verified.",
            spec_decode_.num_draft_tokens);
    counter("kvik:spec_decode_num_accepted_tokens_total", "Speculative decoding: draft tokens accepted.",
            spec_decode_.num_accepted_tokens);
    header(out, "kvik:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Speculative decoding: draft tokens accepted, by position in the draft (0 = first).");
    for (size_t i = 0; i < spec_decode_.accepted_per_pos.size(); ++i)
      out += fmt::format("kvik:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", labels_, i,
                         spec_decode_.accepted_per_pos[i]);
  }
  if (max_loras_ >= 0) {
    header(out, "kvik:lora_requests_info", "gauge",
           "Running and waiting LoRA adapters (the value: when they were taken).");
    out += fmt::format(
        "kvik:lora_requests_info{{{},max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {}\n",
        labels_, max_loras_, escape_label_value(running_loras_), escape_label_value(waiting_loras_),
        format_value(lora_info_time_));
  }
  header(out, "kvik:request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto& [reason, n] : request_success_)
    out += fmt::format("kvik:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels_,
                       escape_label_value(reason), n);
  return out;
}

}  // namespace kvik::server
