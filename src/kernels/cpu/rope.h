// Rotary position embedding (RoPE): each pair (a, b) of a head's first rope_dim dimensions is rotated by
// θ_i = pos · base^(−2i/rope_dim) (/ freq_factors[i] with Llama 3.1 scaling).
#pragma once

#include <cstdint>
#include <span>

namespace kvik {

enum class RopeType { kNorm, kNeox };  // adjacent pairs (llama GGUF) vs halves (HF layout, Qwen)

struct RopeParams {
  int64_t head_dim = 0;
  int64_t rope_dim = 0;
  float freq_base = 10000.0f;
  RopeType type = RopeType::kNorm;
  std::span<const float> freq_factors;  // [rope_dim / 2] divisors, or empty
  float freq_scale = 1.0f;              // linear scaling: every angle times this (1 / rope_scaling factor)
  float mscale = 1.0f;                  // cos and sin times this (LongRoPE's attention factor)
};

// Rotates n_heads heads of one token at position pos, in place. Without freq factors the angles are built by
// repeated multiplication in float, as ggml does; with them each angle is pos · base^(−2i/rope_dim) / f_i in
// double. The same call serves q and k of every model.
void rope(float* x, int64_t n_heads, int32_t pos, const RopeParams& p);

}  // namespace kvik
