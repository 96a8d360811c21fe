// A request as the engine sees it: token ids, sampling parameters and progress. `num_computed_tokens`
// catches up with `num_tokens()` one scheduled chunk at a time; there is no separate prefill or decode phase.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/structured/structured_output.h"

namespace kvik {

// kFinishedError: the request cannot go on (structured output reached a state no token can continue).
enum class RequestStatus {
  kWaiting, kRunning, kPreempted, kFinishedStopped, kFinishedLength, kFinishedAborted, kFinishedError
};

inline bool is_finished(RequestStatus s) { return s >= RequestStatus::kFinishedStopped; }
const char* finish_reason_name(RequestStatus s);  // "stop", "length", "abort", "error"

using Clock = std::chrono::steady_clock;

struct RequestStats {
  Clock::time_point arrival;
  std::optional<Clock::time_point> first_scheduled;  // end of queueing
  std::optional<Clock::time_point> first_token;
  std::optional<Clock::time_point> last_token;
  std::vector<double> token_times_s;  // seconds since arrival of each output token
  double prefill_time_s = 0;           // first scheduled → first token
  double decode_time_s = 0;            // first token → last token
  int32_t num_preemptions = 0;
  int64_t num_cached_tokens = 0;       // prompt tokens served from the prefix cache (first admission)
};

// A request with n > 1 before its fork: it holds the prompt (prefilled once); when the step that completes
// the prompt has run, EngineCore samples the last logits row once per sequence and replaces this request
// by n sequences "<id>-<i>" that share its KV blocks (KVCacheManager::fork, copy-on-write).
struct ParallelSampling {
  int32_t n = 1;
  uint64_t seed = 0;          // sequence i samples from RequestRng(seed + i)
  std::vector<bool> aborted;  // sequences aborted before the fork (their final output is already sent)
  std::vector<std::unique_ptr<structured::GrammarMatcher>> grammars;  // one per sequence when structured

  int32_t num_live() const { return static_cast<int32_t>(std::count(aborted.begin(), aborted.end(), false)); }
};

// The engine id of sequence i of a request added as `id` with n sequences: `id` itself when n == 1.
inline std::string sequence_id(const std::string& id, int32_t index, int32_t n) {
  return n == 1 ? id : id + "-" + std::to_string(index);
}

struct Request {
  std::string request_id;
  std::string parent_id;  // the id add_request was given (== request_id unless this is sequence i of n > 1)
  int32_t index = 0;      // sequence index within the parent (the choice index of an n > 1 request)
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  std::vector<int32_t> all_token_ids;  // prompt + output
  SamplingParams sampling_params;
  std::vector<int32_t> eos_token_ids;  // stop at these unless ignore_eos
  RequestStatus status = RequestStatus::kWaiting;
  int64_t num_computed_tokens = 0;
  std::vector<BlockHash> block_hashes;  // of each full block of all_token_ids, extended as tokens arrive
  RequestRng rng;
  RequestStats stats;
  int64_t admission_seq = 0;  // order of admission to running, for preemption priority
  std::unique_ptr<structured::GrammarMatcher> grammar;  // set when sampling_params.structured_output is
  std::optional<ParallelSampling> parallel;              // set until an n > 1 request forks

  Request(std::string id, std::vector<int32_t> prompt, SamplingParams params, std::vector<int32_t> eos, uint64_t seed)
      : request_id(std::move(id)),
        parent_id(request_id),
        prompt_token_ids(std::move(prompt)),
        all_token_ids(prompt_token_ids),
        sampling_params(std::move(params)),
        eos_token_ids(std::move(eos)),
        rng(seed) {
    stats.arrival = Clock::now();
  }

  int64_t num_tokens() const { return static_cast<int64_t>(all_token_ids.size()); }
  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_token_ids.size()); }
  // Sequences this request will run as once its prompt is done (its share of max_num_seqs).
  int64_t num_seqs() const { return parallel ? parallel->num_live() : 1; }
  void append_output_token(int32_t id) {
    output_token_ids.push_back(id);
    all_token_ids.push_back(id);
  }
};

}  // namespace kvik
