// The per-row operations the Sampler composes: penalties, the filtered sampling distribution (temperature,
// top-k, top-p, min-p), a draw, and log-probabilities for reporting.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/sample/rng.h"
#include "engine/sampling_params.h"

namespace kvik {

// The probability distribution that sampling draws from, after all filters: pairs (token, probability)
// sorted by probability descending (ties: lower id first). Greedy gives one pair with probability 1.
std::vector<std::pair<int32_t, float>> sampling_distribution(std::span<const float> logits, const SamplingParams& p);

// Index of the largest logit (lowest id on ties).
int32_t argmax(std::span<const float> logits);

// Samples one token.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, RequestRng& rng);

// softmax(logits) (no temperature), for reporting probabilities.
std::vector<float> softmax_probs(std::span<const float> logits);

// Penalties of `p` applied in place to one request's logits (see SamplingParams for the formulas).
void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                     const SamplingParams& p);

// The sampled token's log-probability and the `num_top` most likely tokens' (descending, ties: lower id).
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int32_t num_top);

}  // namespace kvik
