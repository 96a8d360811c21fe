// /metrics: vLLM's serving metrics (docs/serving.md lists them) under the `kvik:` prefix, in the
// Prometheus text format. Updated on the engine thread after every step; rendered by HTTP handler threads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace kvik::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends the _bucket (cumulative, le="+Inf" last), _sum and _count lines.
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = above every bound
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // Engine thread, after each step.
  void on_step(const EngineCore& core, const std::vector<RequestOutput>& outputs);
  std::string render() const;
  // --enable-lora: render kvik:lora_requests_info (vLLM's gauge: the adapters running and waiting, max_lora).
  void enable_lora_info(int64_t max_loras);

 private:
  mutable std::mutex mu_;
  std::string labels_;  // model_name="..."
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram request_queue_time_;
  Histogram request_prefill_time_;
  Histogram request_decode_time_;
  int64_t num_requests_running_ = 0;
  int64_t num_requests_waiting_ = 0;
  double kv_cache_usage_perc_ = 0;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  int64_t num_preemptions_ = 0;
  SpecDecodeStats spec_decode_;  // rendered only when speculative decoding is on
  int64_t iteration_tokens_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  std::map<std::string, int64_t> request_success_;  // by finished_reason
  int64_t max_loras_ = -1;                          // -1: LoRA off, no lora_requests_info
  std::string running_loras_, waiting_loras_;       // adapter names, comma-separated
  double lora_info_time_ = 0;                       // when they were taken (the gauge's value, as vLLM)
};

// A label value escaped for the text format (backslash, quote, newline).
std::string escape_label_value(const std::string& v);

}  // namespace kvik::server
