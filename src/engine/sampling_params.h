// Per-request sampling parameters (vLLM's SamplingParams).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/structured_output_spec.h"
#include "model/intervention.h"
#include "model/lora.h"

namespace kvik {

inline constexpr int32_t kMaxLogprobs = 20;

// Why a request cannot run: the request field at fault (OpenAI's error "param", e.g. "logit_bias") and a
// message naming the problem. Returned by validation at every layer, so the server reports the right field.
struct ValidationError {
  std::string param;
  std::string message;
};

struct SamplingParams {
  // Parallel sampling: n sequences from one prompt, prefilled once. Sequence i draws from its own random
  // stream (seed + i when seeded) and has its own penalties and structured-output state; all n share the
  // prompt's KV blocks (EngineCore forks the request when its prompt is done).
  int32_t n = 1;
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
  // Added to the logits of these token ids before sampling (OpenAI's logit_bias, each in [-100, 100]).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // EOS and the stop token ids cannot be sampled before this many output tokens exist.
  int32_t min_tokens = 0;
  // Generation also stops (finish_reason "stop") when one of these ids is sampled; the id is not emitted.
  std::vector<int32_t> stop_token_ids;
  // Structured output: every token outside the spec's grammar is masked to −∞ before sampling, and EOS is
  // allowed only where the grammar accepts (engine/structured/). Compiled by EngineCore::add_request.
  std::optional<StructuredOutputSpec> structured_output;
  // Steering / ablation of the residual stream for this request only (model/intervention.h; build with
  // make_interventions). Its cache key goes into every block hash: steered KV is never shared with plain KV.
  std::shared_ptr<const InterventionList> interventions;
  // The LoRA adapter this request runs under (vLLM's LoRARequest; model/lora.h), or null for the base model. Its id
  // goes into every block hash: KV computed under one adapter is never served to another. Holding it keeps the
  // adapter alive after an unload until the request finishes.
  std::shared_ptr<const LoraAdapter> lora;

  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }

  // What is wrong with the values themselves (ranges), or nullopt. Checks that need the model (token ids
  // inside the vocabulary, n against max_num_seqs, the grammar compiling) are EngineCore::add_request's.
  std::optional<ValidationError> validate() const;
};

}  // namespace kvik
