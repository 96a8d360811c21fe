// EngineCore (vLLM's engine/core.py): owns the model runner, the KV cache and the scheduler, and runs one
// step at a time: schedule() → execute_model() → update_from_output(). add_request() and abort() may be
// called from any thread; step() runs on the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace kvik {

struct EngineConfig {
  int64_t max_model_len = 0;            // 0 = the model's context length
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int32_t block_size = 16;
  double kv_cache_memory_gib = 0;       // 0 = memory_utilization × RAM − weights
  double memory_utilization = 0.9;
  int64_t num_kv_blocks = 0;            // > 0 overrides both (tests)
  bool enable_prefix_caching = true;
  KvDType kv_cache_dtype = KvDType::kF32;
  int64_t long_prefill_token_threshold = 0;
  bool log_stats = true;                // print the start-up capacity lines
};

// What the KV pool can hold, as the course explains it; computed once at start-up.
struct KvCapacity {
  int64_t bytes_per_token = 0;
  int64_t num_blocks = 0;
  int64_t tokens = 0;
  double gib = 0;
  double max_concurrency = 0;  // tokens / max_model_len
};

struct RequestOutput {
  std::string request_id;  // the sequence: add_request's id, or sequence_id(id, index, n) when n > 1
  std::string parent_id;   // add_request's id
  int32_t index = 0;       // the sequence's index in 0..n-1 (the choice)
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprobs> logprobs;  // one per new token when the request asked for logprobs
  bool finished = false;
  std::string finish_reason;  // "stop", "length", "abort", "error" when finished
  std::string error;          // what went wrong when finish_reason is "error"
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  RequestStats stats;  // complete when finished
};

class EngineCore {
 public:
  EngineCore(LlamaModel& model, const EngineConfig& config, std::vector<int32_t> eos_token_ids);

  const EngineConfig& config() const { return config_; }  // max_model_len resolved
  const KvCapacity& capacity() const { return capacity_; }

  // Validates and queues a request. Returns an error message naming the problem, or "" when queued.
  // Thread-safe, like abort() and has_unfinished(); everything else belongs to the engine thread.
  // With params.n > 1 the prompt is prefilled once and then forks into n sequences with the ids
  // sequence_id(id, i, n) = "<id>-<i>", sharing the prompt's KV blocks; each output names its sequence.
  std::string add_request(const std::string& id, std::vector<int32_t> prompt_ids, const SamplingParams& params);
  // Aborts a request: every sequence of it when `id` is add_request's id, one sequence when it is that
  // sequence's id (the others go on). Each aborted sequence gets one final output ("abort").
  void abort(const std::string& id);

  // Structured output needs every token's bytes (structured::VocabTrie::token_bytes_of(tokenizer), the
  // control tokens left empty). Until this is called, requests with structured_output are refused. Call
  // before the first add_request.
  void enable_structured_output(std::vector<std::string> token_bytes);

  // One engine step. Returns the new tokens and finishes of this step (aborts included).
  std::vector<RequestOutput> step();
  bool has_unfinished() const;

  // Observability for metrics, benchmarks and tests (call from the engine thread).
  const Scheduler& scheduler() const { return *scheduler_; }
  const KVCacheManager& kv_cache_manager() const { return *kv_; }
  int64_t last_step_tokens() const { return last_step_tokens_; }
  double last_step_mask_seconds() const { return last_step_mask_s_; }  // structured-output masks of the last step

 private:
  void drain_pending(std::vector<RequestOutput>& outputs);
  void run_step(std::vector<RequestOutput>& outputs);
  void retire(const std::vector<RequestOutput>& outputs);  // forget the ids of finished requests
  void abort_id(const std::string& id, std::vector<RequestOutput>& outputs);
  void abort_sequence(const std::string& id, std::vector<RequestOutput>& outputs);
  std::optional<RequestStatus> check_stop(const Request& r, int32_t token) const;
  // Samples req's next token from its logits row (penalties, bias, min_tokens, the grammar's `mask`),
  // appends it and checks the stops. The output is marked finished (status set) when the request ends.
  RequestOutput sample(Request& req, std::span<const float> row, const structured::TokenMask* mask,
                       const std::string& mask_error, Clock::time_point now);
  // An n > 1 request whose prompt is done: samples `row` once per live sequence and forks.
  void fork(Request& parent, std::span<const float> row, std::vector<RequestOutput>& outputs, Clock::time_point now);
  void compute_grammar_masks(const std::vector<Request*>& sample_reqs);

  LlamaModel& model_;
  EngineConfig config_;
  KvCapacity capacity_;
  std::vector<int32_t> eos_token_ids_;
  std::unique_ptr<KvCacheTensors> cache_;
  std::unique_ptr<KVCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  int64_t last_step_tokens_ = 0;
  std::vector<float> penalized_logits_;  // [vocab] scratch for requests with penalties
  std::unique_ptr<structured::StructuredOutputManager> structured_;
  std::vector<std::shared_ptr<const structured::TokenMask>> grammar_masks_;  // per sampled request this step
  std::vector<std::string> grammar_errors_;
  std::vector<float> masked_logits_;  // [vocab]
  std::vector<Request*> sample_reqs_;  // this step's requests that sample, in batch order
  double last_step_mask_s_ = 0;
  uint64_t seed_counter_;
  // n > 1 requests until all their sequences have finished (engine thread).
  struct SequenceGroup {
    std::vector<std::string> sequence_ids;
    int32_t num_unfinished = 0;
  };
  std::unordered_map<std::string, SequenceGroup> groups_;
  std::unordered_map<std::string, std::pair<std::string, int32_t>> sequence_group_;  // sequence → (parent, index)

  mutable std::mutex mu_;  // guards the members below; the scheduler is touched by the engine thread only
  std::set<std::string> live_ids_;  // added and not yet reported finished
  std::vector<std::unique_ptr<Request>> pending_adds_;
  std::vector<std::string> pending_aborts_;
};

// Total physical memory of this machine in bytes.
int64_t physical_memory_bytes();

}  // namespace kvik
