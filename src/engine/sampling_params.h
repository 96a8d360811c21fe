// Per-request sampling parameters (vLLM's SamplingParams).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/structured_output_spec.h"

namespace kvik {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 or -1 = all tokens
  float top_p = 1.0f;        // nucleus mass kept
  float min_p = 0.0f;        // drop tokens with p < min_p · p_max
  std::optional<uint64_t> seed;
  int32_t max_tokens = 16;
  bool ignore_eos = false;
  // Penalties (vLLM's definitions): presence/frequency subtract from the logits of tokens already in the
  // output (once / once per occurrence); repetition divides positive logits (multiplies negative ones) of
  // tokens seen in the prompt or the output.
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0, 1 = off
  // Log-probabilities reported per generated token: -1 = none, 0 = the sampled token's only, k = also the
  // k most likely tokens. Computed from the raw logits (before penalties and temperature), as vLLM does.
  int32_t logprobs = -1;
  // Structured output: every token outside the spec's grammar is masked to −∞ before sampling, and EOS is
  // allowed only where the grammar accepts (engine/structured/). Compiled by EngineCore::add_request.
  std::optional<StructuredOutputSpec> structured_output;

  bool has_penalties() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f; }

  // Empty string when valid, otherwise what is wrong (naming the field).
  std::string validate() const;
};

}  // namespace kvik
