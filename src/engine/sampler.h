// Turning logits into the next token: temperature, top-k, top-p, min-p, then a draw from a per-request
// random stream (so a seeded request gives the same text alone or in any batch).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace kvik {

// A per-request random stream: splitmix64-seeded xoshiro256**; the same seed gives the same draws.
class RequestRng {
 public:
  explicit RequestRng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)

 private:
  uint64_t s_[4];
};

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

inline constexpr int32_t kMaxLogprobs = 20;

// The sampled token's log-probability and the `num_top` most likely tokens' (descending, ties: lower id).
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int32_t num_top);

}  // namespace kvik
