// Per-request sampling parameters (vLLM's SamplingParams).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvik {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 or -1 = all tokens
  float top_p = 1.0f;        // nucleus mass kept
  float min_p = 0.0f;        // drop tokens with p < min_p · p_max
  std::optional<uint64_t> seed;
  int32_t max_tokens = 16;
  bool ignore_eos = false;

  // Empty string when valid, otherwise what is wrong (naming the field).
  std::string validate() const;
};

}  // namespace kvik
