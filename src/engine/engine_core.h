// EngineCore (vLLM's engine/core.py): owns the model runner, the KV cache, the scheduler and the sampler, and
// runs one step at a time: Scheduler::schedule() → ModelRunner::execute() → Sampler::sample() → append the
// tokens, check the stops. add_request(), abort() and has_unfinished() may be called from any thread; step()
// and the observers below belong to the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/draft_runner.h"
#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/parent_request.h"
#include "engine/request.h"
#include "engine/sample/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec_decode.h"
#include "engine/suffix_cache.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace kvik {

struct EngineConfig {
  int64_t max_model_len = 0;  // 0 = the model's context length
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int32_t block_size = 16;
  double kv_cache_memory_gib = 0;  // 0 = memory_utilization × RAM − weights
  double memory_utilization = 0.9;
  int64_t num_kv_blocks = 0;  // > 0 overrides both (tests)
  bool enable_prefix_caching = true;
  DType kv_cache_dtype = DType::F16;  // --kv-cache-dtype auto: a 16-bit cache, as vLLM and llama.cpp
  int64_t long_prefill_token_threshold = 0;
  bool log_stats = true;          // print the start-up capacity lines
  int32_t num_threads = 0;        // compute threads (the kernels' process-wide pool); 0 = leave it as is
  bool repack_weights = true;     // load_model(): LoadOptions::repack_weights
  SpeculativeConfig speculative;  // --speculative-config (engine/spec_decode.h); off by default
  // Most distinct LoRA adapters in one step (--max-loras; vLLM's default 1). Requests select an adapter through
  // SamplingParams::lora; the base model needs no slot.
  int64_t max_loras = 1;
  // Tensor and pipeline parallelism under mpirun (--tensor-parallel-size, --pipeline-parallel-size): rank 0 runs
  // this engine's scheduler and sampler, every rank its shard of the model (engine/parallel_engine.h).
  ParallelConfig parallel;
};

// Applies config.num_threads to the kernels' thread pool and loads the model with config's load options
// (LlamaModel::load). The CLI commands load their model through this.
std::unique_ptr<LlamaModel> load_model(const std::string& path, const EngineConfig& config);

struct RequestOutput {
  std::string request_id;  // the sequence: add_request's id, or sequence_id(id, index, n) when n > 1
  std::string parent_id;   // add_request's id
  int32_t index = 0;       // the sequence's index in 0..n-1 (the choice)
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprobs> logprobs;  // one per new token when the request asked for logprobs
  bool finished = false;
  std::string finish_reason;  // "stop", "length", "abort" (or the reason given to abort()), "error"
  std::string error;          // what went wrong when finish_reason is "error"
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  RequestStats stats;  // complete when finished
};

class EngineCore {
 public:
  EngineCore(LlamaModel& model, const EngineConfig& config, std::vector<int32_t> eos_token_ids);
  ~EngineCore();  // rank 0 of a parallel job: logs the preemptions and the free blocks the run ended with

  const EngineConfig& config() const { return config_; }  // max_model_len resolved
  const KvCapacity& capacity() const { return capacity_; }

  // Validates and queues a request; nullopt when queued, else the field at fault and what is wrong.
  // With params.n > 1 the prompt is prefilled once and then forks into n sequences with the ids
  // sequence_id(id, i, n) = "<id>-<i>", sharing the prompt's KV blocks; each output names its sequence.
  std::optional<ValidationError> add_request(const std::string& id, std::vector<int32_t> prompt_ids,
                                             const SamplingParams& params);
  // Aborts a request: every sequence of it when `id` is add_request's id, one sequence when it is that
  // sequence's id (the others go on). Each aborted sequence gets one final output whose finish_reason is
  // `reason` (the server passes "stop" when it matched a stop string). Unknown ids are ignored.
  void abort(const std::string& id, const std::string& reason = "abort");

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
  // A rank other than 0 of a tensor / pipeline parallel job: runs the steps rank 0's engine sends (ModelRunner::
  // execute_remote) until it says stop.
  void run_worker_steps();
  int64_t last_step_tokens() const { return last_step_tokens_; }
  double last_step_mask_seconds() const { return sampler_.last_mask_seconds(); }
  const SpecDecodeStats& spec_decode_stats() const { return spec_stats_; }
  // The served model, for work between steps on the engine thread (AsyncEngine::run_between_steps).
  LlamaModel& model() { return model_; }

 private:
  // One sequence that samples this step: a scheduled request, or (for an n > 1 prompt that just completed)
  // one of the sequences it forks into, not yet known to the scheduler.
  struct SampleSlot {
    Request* request = nullptr;
    std::unique_ptr<Request> child;  // set for a fork's sequence
    Request* scheduled = nullptr;    // the scheduled request whose rows these are (the prompt, for a fork's)
    int64_t logits_row = 0;
    int64_t num_rows = 1;  // 1 + drafts
  };

  std::optional<ValidationError> validate(const std::vector<int32_t>& prompt_ids, const SamplingParams& params) const;
  void drain_pending(std::vector<RequestOutput>& outputs);
  void run_step(std::vector<RequestOutput>& outputs);
  std::vector<SampleSlot> sample_slots(const std::vector<SampleRows>& rows);
  // Speculative decoding: drafts for every running decode that may speculate, before schedule().
  void propose_drafts();
  // draft_model: allocates the blocks the draft writes and the verification needs (false: not this step).
  bool reserve_draft_slots(Request& req, int32_t k);
  // Verifies a speculating request's drafts against its rows (Sampler::verify_draft) and appends the accepted
  // tokens and the target's next one, stopping where the request stops; rolls back the rejected drafts.
  RequestOutput verify_drafts(Request& req, const float* logits, int64_t first_row, int64_t num_rows,
                              Clock::time_point now);
  void log_spec_decode_stats();
  std::unique_ptr<Request> make_sequence(const Request& prompt, int32_t index) const;
  void retire(const std::vector<RequestOutput>& outputs);  // forget requests whose sequences all finished
  void abort_id(const std::string& id, const std::string& reason, std::vector<RequestOutput>& outputs);
  void abort_sequence(ParentRequest& parent, int32_t index, const std::string& reason,
                      std::vector<RequestOutput>& outputs);
  // Appends the sampled token to the request and to `o` (or ends the sequence) and checks the stops; `o` is
  // marked finished (request status set) when the sequence ends.
  void append_token(Request& req, const SampleResult& r, Clock::time_point now, RequestOutput& o);
  RequestOutput new_output(const Request& req) const;  // no tokens yet
  std::optional<RequestStatus> check_stop(const Request& r, int32_t token) const;

  LlamaModel& model_;
  EngineConfig config_;
  KvCapacity capacity_;
  std::vector<int32_t> eos_token_ids_;
  std::unique_ptr<KvCacheTensors> cache_;
  std::unique_ptr<KVCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  Sampler sampler_;
  std::unique_ptr<LlamaModel> draft_model_;      // --speculative-config method draft_model
  std::unique_ptr<KvCacheTensors> draft_cache_;  // its KV, in the same block ids as cache_
  std::unique_ptr<DraftRunner> draft_runner_;
  std::unique_ptr<SuffixCache> suffix_;       // --speculative-config method suffix: recent requests' texts
  std::vector<DraftRunner::Job> draft_jobs_;  // this step's proposals (reused)
  std::unique_ptr<structured::StructuredOutputManager> structured_;
  int64_t last_step_tokens_ = 0;
  uint64_t seed_counter_;
  std::vector<SampleRows> sample_rows_;     // this step's requests that sample, in batch order
  std::vector<SampleInput> sample_inputs_;  // reused across steps
  std::vector<SampleResult> sample_results_;
  StepCostModel step_cost_;         // seconds per step by query tokens, for the adaptive draft length
  double draft_token_seconds_ = 0;  // draft_model: moving average of the seconds per proposed token
  SpecDecodeStats spec_stats_;
  SpecDecodeStats spec_logged_;  // at the last periodic log line
  Clock::time_point spec_log_time_;

  mutable std::mutex mu_;  // guards the members below
  // The one registry of requests in the engine: every id a user may name (add_request's and, with n > 1,
  // each sequence's) → its ParentRequest, from add_request until its last sequence's final output.
  std::unordered_map<std::string, std::shared_ptr<ParentRequest>> requests_;
  std::vector<std::unique_ptr<Request>> pending_adds_;
  std::vector<std::pair<std::string, std::string>> pending_aborts_;  // (id, finish_reason)
};

}  // namespace kvik
