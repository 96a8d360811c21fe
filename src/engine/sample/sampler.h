// The sampling pipeline (vLLM's v1/sample/sampler.py): one call per step turns the logits rows of every
// sequence that produces a token into that token. For each row, in this order:
//   logit bias → min_tokens (EOS and stop ids masked) → penalties → grammar mask → logprobs of the raw
//   distribution → temperature → top-k / top-p / min-p → a draw from the sequence's own random stream.
// Speculative decoding's rejection sampler sits beside it (same inputs, k + 1 rows per sequence).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sample/logits_ops.h"
#include "engine/sample/rng.h"
#include "engine/sampling_params.h"
#include "engine/structured/structured_output.h"

namespace kvik {

// One sequence to sample this step: which logits row, and its per-request state.
struct SampleInput {
  int64_t logits_row = 0;
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_ids;  // for the repetition penalty
  std::span<const int32_t> output_ids;  // for penalties and min_tokens
  std::span<const int32_t> eos_ids;     // masked before min_tokens; allowed by a grammar only where it accepts
  RequestRng* rng = nullptr;
  structured::GrammarMatcher* grammar = nullptr;  // null when unconstrained
};

struct SampleResult {
  enum class Status {
    kToken,            // `token` was drawn
    kGrammarComplete,  // the grammar allows no further token and accepts the output: the sequence stops
    kGrammarError,     // the grammar allows no token and does not accept (or failed): `error` says why
  };
  Status status = Status::kToken;
  int32_t token = -1;
  std::string error;
  std::optional<TokenLogprobs> logprobs;  // when params->logprobs >= 0 and a token was drawn
};

class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);

  // Samples every input from `logits` ([rows, V], row-major). results[i] belongs to inputs[i]. Grammar
  // masks are computed for all constrained inputs first (in parallel on the thread pool); the grammars
  // themselves are not advanced (the engine accepts the token when it appends it).
  void sample(const float* logits, std::span<const SampleInput> inputs, std::vector<SampleResult>& results);

  double last_mask_seconds() const { return last_mask_s_; }  // structured-output masks of the last call

  // One row of a sequence without a grammar (in.grammar must be null): the same pipeline as sample().
  // Speculative decoding samples its bonus token with it.
  SampleResult sample_unconstrained(std::span<const float> row, const SampleInput& in);
  // Speculative decoding's verification of one draft token at one position (sample/rejection_sampler.cpp):
  // `row` is the target's logits there and `in` the sequence with every accepted token before it. p is the
  // distribution sample() would draw from (the same filter chain: bias, min_tokens, penalties, temperature,
  // top-k/p, min-p); the proposal q is one-hot on `draft` (n-gram drafts are deterministic). Greedy: accepted
  // iff draft == argmax, and the result is the argmax either way. Sampled: accepted with probability p(draft);
  // otherwise the result is drawn from norm(max(0, p − q)) = p without the draft, renormalised — so the token
  // is distributed exactly as p (Leviathan et al. 2023, Chen et al. 2023). in.grammar must be null.
  SampleResult verify_draft(std::span<const float> row, const SampleInput& in, int32_t draft, bool& accepted);

 private:
  void compute_grammar_masks(std::span<const SampleInput> inputs);
  SampleResult sample_one(std::span<const float> row, const SampleInput& in, size_t i);
  // The row after logit bias, min_tokens and penalties (a view of `row` itself when none applies).
  std::span<const float> adjusted_logits(std::span<const float> row, const SampleInput& in);

  int64_t vocab_size_;
  std::vector<float> adjusted_;                                      // [V] the row after bias, min_tokens and penalties
  std::vector<float> masked_;                                        // [V] after the grammar mask
  std::vector<std::shared_ptr<const structured::TokenMask>> masks_;  // per input this call
  std::vector<std::string> mask_errors_;
  double last_mask_s_ = 0;
};

}  // namespace kvik
