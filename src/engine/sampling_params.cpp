#include "engine/sampling_params.h"

#include <fmt/format.h>

#include <cmath>

namespace kvik {

std::optional<ValidationError> SamplingParams::validate() const {
  auto err = [](const char* param, std::string message) { return ValidationError{param, std::move(message)}; };
  if (n < 1) return err("n", "n must be at least 1");
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return err("temperature", "temperature must be a finite number >= 0");
  if (top_k < -1) return err("top_k", "top_k must be -1, 0 (disabled) or a positive number");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return err("top_p", "top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return err("min_p", "min_p must be in [0, 1]");
  if (max_tokens < 1) return err("max_tokens", "max_tokens must be at least 1");
  if (min_tokens < 0 || min_tokens > max_tokens) return err("min_tokens", "min_tokens must be in [0, max_tokens]");
  for (const auto& [id, bias] : logit_bias)
    if (!std::isfinite(bias) || bias < -100.0f || bias > 100.0f)
      return err("logit_bias", "logit_bias values must be in [-100, 100]");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return err("presence_penalty", "presence_penalty must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return err("frequency_penalty", "frequency_penalty must be in [-2, 2]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return err("repetition_penalty", "repetition_penalty must be a finite number > 0");
  if (logprobs < -1 || logprobs > kMaxLogprobs)
    return err("logprobs", fmt::format("logprobs must be in 0..{}", kMaxLogprobs));
  return std::nullopt;
}

}  // namespace kvik
