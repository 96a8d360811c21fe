// Continuous batching with chunked prefill (vLLM v1's Scheduler). Every step has a token budget
// (max_num_batched_tokens) and a sequence limit (max_num_seqs). Running requests that decode get one token
// each first; the rest of the budget goes to prefills — running ones mid-prompt, then waiting ones — chunked
// to fit. When the pool runs out of blocks the most recently admitted running request is preempted: its
// blocks are freed and it goes back to the front of the waiting queue, to be recomputed later.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace kvik {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  // Longest chunk of one prompt per step (0 = the token budget): smaller chunks interleave prefills with
  // decodes more finely.
  int64_t long_prefill_token_threshold = 0;
  // Most distinct LoRA adapters in one step (vLLM's --max-loras; the base model needs no slot); 0 = no limit.
  int64_t max_loras = 0;
};

struct ScheduledRequest {
  Request* request = nullptr;
  int64_t num_scheduled_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // in batch order
  int64_t total_num_scheduled_tokens = 0;
  std::vector<std::string> preempted_ids;
  std::vector<BlockCopy> blocks_to_copy;  // copy-on-write, to run before the forward pass (in order)
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KVCacheManager& kv);

  // The request must already be validated (prompt fits max_model_len, etc.).
  void add_request(std::unique_ptr<Request> req);
  // Frees the request's blocks and forgets it; returns it (status set to aborted) or nullptr if unknown.
  std::unique_ptr<Request> abort_request(const std::string& id);

  // A decode carries its drafts (Request::spec_token_ids, set by the engine before schedule()) as extra query
  // tokens when budget and blocks allow; the scheduler trims them to what it scheduled and clears them
  // otherwise.
  SchedulerOutput schedule();
  // Marks tokens computed after the step ran; the engine then appends sampled tokens and calls finish().
  // A speculating request counts its drafts as computed too; the engine rolls num_computed_tokens back to the
  // accepted ones (reject_drafts). Only full blocks of all_token_ids, which never holds a
  // draft, enter the prefix cache.
  void update_after_step(const SchedulerOutput& out);
  // Speculative decoding: `num_rejected` of the request's drafts were rejected. Their positions stop counting
  // as computed (their KV is overwritten by the next step's writes) and blocks past the accepted tokens go
  // back to the pool.
  void reject_drafts(Request& req, int64_t num_rejected);
  // Removes a finished request (status already set), freeing its blocks.
  std::unique_ptr<Request> finish_request(const std::string& id);
  // Parallel sampling: the running request `parent_id` (an n > 1 request whose prompt is done) becomes
  // `children`, which join the running requests holding the parent's blocks (shared, copy-on-write); the
  // parent is removed. Each child has num_computed_tokens == the parent's and one sampled token appended.
  void fork(const std::string& parent_id, std::vector<std::unique_ptr<Request>> children);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_preemptions_total() const { return num_preemptions_; }
  const std::vector<Request*>& running() const { return running_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  Request* find(const std::string& id) const;

 private:
  // One schedule() call's state: the output so far, the token budget left, scheduled request → position.
  struct StepBuilder {
    SchedulerOutput out;
    int64_t budget = 0;
    std::unordered_map<Request*, size_t> index;
  };
  void add_scheduled(StepBuilder& st, Request* req, int64_t num_new);
  bool schedule_running(StepBuilder& st, Request* req, int64_t num_new);
  void schedule_decode(StepBuilder& st, Request* req);
  void schedule_running_requests(StepBuilder& st);
  void admit_waiting(StepBuilder& st);
  void preempt(Request* victim);
  int64_t chunk_limit(int64_t budget) const;

  SchedulerConfig config_;
  KVCacheManager& kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // in admission order
  int64_t admission_counter_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace kvik
