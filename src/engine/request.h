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
#include "engine/parent_request.h"
#include "engine/sample/rng.h"
#include "engine/sampling_params.h"
#include "engine/spec_decode.h"
#include "engine/structured/structured_output.h"

namespace kvik {

// kFinishedError: the request cannot go on (structured output reached a state no token can continue).
enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
  kFinishedError
};

inline bool is_finished(RequestStatus s) { return s >= RequestStatus::kFinishedStopped; }
// "stop", "length", "abort", "error" for a finished status, "" otherwise.
inline const char* finish_reason_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::kFinishedStopped: return "stop";
    case RequestStatus::kFinishedLength: return "length";
    case RequestStatus::kFinishedAborted: return "abort";
    case RequestStatus::kFinishedError: return "error";
    default: return "";
  }
}

using Clock = std::chrono::steady_clock;

struct RequestStats {
  Clock::time_point arrival;
  std::optional<Clock::time_point> first_scheduled;  // end of queueing
  std::optional<Clock::time_point> first_token;
  std::optional<Clock::time_point> last_token;
  std::vector<double> token_times_s;  // seconds since arrival of each output token
  double prefill_time_s = 0;          // first scheduled → first token
  double decode_time_s = 0;           // first token → last token
  int32_t num_preemptions = 0;
  int64_t num_cached_tokens = 0;     // prompt tokens served from the prefix cache (first admission)
  int64_t spec_drafts = 0;           // speculative decoding: steps that verified drafts for this sequence
  int64_t spec_draft_tokens = 0;     // speculative decoding: draft tokens verified for this sequence
  int64_t spec_accepted_tokens = 0;  // and accepted

  // An output token arrived at `now`.
  void record_token(Clock::time_point now) {
    if (!first_token) {
      first_token = now;
      if (first_scheduled) prefill_time_s = std::chrono::duration<double>(now - *first_scheduled).count();
    }
    last_token = now;
    token_times_s.push_back(std::chrono::duration<double>(now - arrival).count());
  }
  // The sequence ended.
  void finish() {
    if (first_token && last_token) decode_time_s = std::chrono::duration<double>(*last_token - *first_token).count();
  }
};

// One sequence the scheduler runs. An n > 1 request is first one Request with the parent's id (its prompt,
// prefilled once); when that prompt is done it forks into n Requests "<id>-<i>" (ParentRequest).
struct Request {
  std::string request_id;
  std::string parent_id;  // the id add_request was given (== request_id unless this is sequence i of n > 1)
  int32_t index = 0;      // sequence index within the parent (the choice index of an n > 1 request)
  std::shared_ptr<ParentRequest> parent;  // the request as added: its n sequences and which are finished
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
  int64_t admission_seq = 0;                            // order of admission to running, for preemption priority
  std::unique_ptr<structured::GrammarMatcher> grammar;  // set when sampling_params.structured_output is
  // Speculative decoding: the drafts scheduled this step (query tokens after the last token, never part of
  // all_token_ids: only accepted tokens are appended, so only they reach a block hash), and whether this
  // request currently proposes any.
  std::vector<int32_t> spec_token_ids;
  SpecDecodeGate spec_gate;
  // draft_model: the tokens whose draft-model KV this sequence's blocks hold, in position order (the draft's own
  // proposals after the last real token until they are checked); cleared when preemption frees the blocks.
  std::vector<int32_t> draft_fed;

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
  // An n > 1 request's prompt, not yet forked into its sequences.
  bool forks() const { return parent && parent->n > 1 && request_id == parent->request_id; }
  // Sequences this request will run as once its prompt is done (its share of max_num_seqs).
  int64_t num_seqs() const { return forks() ? parent->num_unfinished() : 1; }
  void append_output_token(int32_t id) {
    output_token_ids.push_back(id);
    all_token_ids.push_back(id);
  }
};

}  // namespace kvik
