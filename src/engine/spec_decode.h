// Speculative decoding (vLLM's v1/spec_decode): the configuration `--speculative-config` gives, the n-gram
// (prompt lookup) proposer, the per-request gate that stops proposing when acceptance stays low, and the
// counters behind the spec_decode_* metrics. Verification happens in EngineCore's step: a request with k
// drafts is scheduled for k + 1 query tokens in the same flat batch as everyone else, the runner returns
// k + 1 logits rows, and Sampler::verify_draft accepts or replaces each draft (sample/rejection_sampler.cpp).
// Expected tokens per step at acceptance rate α: (1 − α^(k+1)) / (1 − α).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvik {

struct SpeculativeConfig {
  enum class Method { kNone, kNgram, kDraftModel, kSuffix };
  Method method = Method::kNone;
  int32_t num_speculative_tokens = 0;  // k: drafts proposed per step
  // n-gram: the longest suffix of n tokens (max down to min) that also occurs earlier in prompt + output
  // proposes the tokens that followed that earlier occurrence.
  int32_t prompt_lookup_max = 0;
  int32_t prompt_lookup_min = 0;
  // vLLM's disable_by_batch_size: nobody proposes while more than this many requests are in the engine
  // (running + waiting; 0 = no limit).
  // Verification costs compute per query token, and a big batch is no longer memory-bound.
  int32_t disable_by_batch_size = 0;
  // draft_model: a second, smaller model with the same vocabulary proposes k tokens greedily (so the proposal
  // q is one-hot and Sampler::verify_draft stays exact); it keeps its own KV per request.
  // suffix (vLLM's keys): the longest match of the request's latest tokens, up to max_tree_depth, in its own text
  // and the last max_cached_requests requests' texts proposes what followed it, at most max_spec_factor × the match
  // length (and k) tokens (engine/suffix_cache.h).
  int32_t suffix_max_tree_depth = 24;
  int32_t suffix_max_cached_requests = 1000;
  double suffix_max_spec_factor = 1.0;
  std::string model;
  // kvik's extension "adaptive" (default true): each step, each request drafts the number of tokens, 0..k, that
  // maximizes expected output tokens per second of the step, from its own acceptance rate and the measured cost of
  // steps by size (StepCostModel). false: always k (as vLLM), only the low-acceptance gate pauses.
  bool adaptive = true;

  bool enabled() const { return method != Method::kNone; }
};

// Parses vLLM's JSON spelling, e.g. {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
// "prompt_lookup_min": 2} or {"method": "draft_model", "model": "PATH", "num_speculative_tokens": 4}. As vLLM: with
// neither lookup bound given both are 5, with one given the other equals it. Throws kvik::Error naming the key or value
// at fault (bad JSON, unknown method or key, out of range). An empty string gives speculation off.
SpeculativeConfig parse_speculative_config(const std::string& json);
std::string describe(const SpeculativeConfig& c);  // one line for the start-up log

// Prompt lookup: finds the most recent earlier occurrence of the longest suffix of `tokens` of length
// max_n down to min_n and writes up to k tokens that followed it into `out` (cleared first). The copy may run
// into its own output (a loop of period p < k continues for k tokens), so a match always proposes k.
// Returns out.size() (0 when no suffix matches).
int32_t ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t k,
                      std::vector<int32_t>& out);

// Per request: speculation pays only while drafts are accepted. A rejected draft costs a query token of compute,
// and on a CPU that is not free (how much, StepCostModel measures; the adaptive draft length weighs it against the
// acceptance estimate below, and pause() stops a request for which no draft length pays). After every
// kWindow draft tokens the window's acceptance is checked; below kMinAcceptance the request stops proposing for
// kPauseTokens output tokens, doubled for each further failed window (up to 16x), then tries again; a window
// that passes resets the pause. Free generation that lookup cannot predict thus runs at plain decode speed but
// for a few probing steps.
class SpecDecodeGate {
 public:
  static constexpr int32_t kWindow = 8;
  static constexpr double kMinAcceptance = 0.5;
  static constexpr int64_t kPauseTokens = 64;
  static constexpr int32_t kMaxBackoff = 4;  // the pause doubles at most 4 times

  bool allows(int64_t num_output_tokens) const { return num_output_tokens >= paused_until_; }
  void record(int32_t num_drafted, int32_t num_accepted, int64_t num_output_tokens);
  // The request's per-draft acceptance probability: successes over trials of its verifications (a verification
  // that accepts a of d drafts is a successes in a + (a < d) trials), decayed so recent steps weigh more, starting
  // from a prior of 1 in 2. The adaptive draft length uses it.
  double acceptance() const { return successes_ / trials_; }
  bool has_evidence() const { return trials_ != kPriorTrials; }
  // Pauses proposing (as a failed window does), and forgets the acceptance estimate, so the request probes afresh
  // after the pause: the adaptive draft length found no k that pays.
  void pause(int64_t num_output_tokens);
  // Updates the acceptance estimate with one verification (adaptive mode; fixed k uses record()'s windows).
  void observe_verification(int32_t num_drafted, int32_t num_accepted);

 private:
  int32_t drafted_ = 0;
  int32_t accepted_ = 0;
  int64_t paused_until_ = 0;
  int32_t failures_ = 0;  // consecutive failed windows
  double successes_ = kPriorSuccesses;
  double trials_ = kPriorTrials;
  static constexpr double kPriorSuccesses = 1, kPriorTrials = 2, kDecay = 0.8;
};

// What a forward step costs by its number of query tokens, learned from the steps the engine runs (prefill chunks,
// decodes, verifications): an exponential moving average per size up to kMaxTracked, linear interpolation
// between sizes seen, and beyond the largest the slope of the two largest. The cost of k more query tokens is
// what decides whether drafting pays, and it differs by CPU and model: a memory-bound step of 5 tokens costs little
// more than a step of 1, an overhead- or compute-bound one several times as much (bench/spec_decode.sh).
class StepCostModel {
 public:
  static constexpr int64_t kMaxTracked = 512;
  static constexpr double kWeight = 0.25;  // of a new observation in its size's average

  void observe(int64_t num_tokens, double seconds);
  // Predicted seconds of a step of n query tokens; 0 while fewer than two sizes have been seen.
  double predict(int64_t n) const;
  bool calibrated() const { return num_sizes_ >= 2; }

 private:
  std::vector<double> mean_ = std::vector<double>(kMaxTracked + 1, 0.0);  // 0: not seen
  int32_t num_sizes_ = 0;
};

// Expected tokens one verification yields with k drafts, each accepted with probability alpha until the first
// rejection, plus the target's own token: (1 − α^(k+1)) / (1 − α) (docs/concepts.md, "Speculative decoding").
double expected_tokens_per_step(double alpha, int32_t k);

// The draft length, 0..k_max, that maximizes the step's expected output tokens per second, given the tokens the
// step already holds (step_tokens, yielding step_yield expected output tokens), this request's acceptance
// probability, and the seconds each draft token costs to propose (the draft model's forward pass; 0 for n-gram).
// 0 when no k gains at least kMinGain over not drafting. Uncalibrated cost: k_max (probe).
inline constexpr double kMinGain = 1.03;
int32_t choose_num_drafts(const StepCostModel& cost, int64_t step_tokens, double step_yield, double alpha,
                          int32_t k_max, double draft_token_seconds);

// Engine-wide counters (vLLM's spec_decode metrics). accepted_per_pos[i]: drafts at position i accepted.
struct SpecDecodeStats {
  int64_t num_drafts = 0;        // verifications (requests × steps that carried drafts)
  int64_t num_draft_tokens = 0;  // draft tokens verified
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;

  double acceptance_rate() const {
    return num_draft_tokens > 0 ? static_cast<double>(num_accepted_tokens) / static_cast<double>(num_draft_tokens)
                                : 0.0;
  }
  // Tokens per verification step: accepted drafts + the one token the target always gives (vLLM's "mean
  // acceptance length").
  double mean_accepted_len() const {
    return num_drafts > 0 ? 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts) : 0.0;
  }
};

}  // namespace kvik
