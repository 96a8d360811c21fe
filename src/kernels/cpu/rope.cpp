#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace kvik {

namespace {

// cs = [cos θ_0 .. cos θ_{half−1}, sin θ_0 .. sin θ_{half−1}]
void rope_angles(int32_t pos, const RopeParams& p, float* cs) {
  const int64_t half = p.rope_dim / 2;
  if (p.freq_factors.empty()) {
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.rope_dim));
    float theta = static_cast<float>(pos);
    for (int64_t i = 0; i < half; ++i) {
      cs[i] = std::cos(theta * p.freq_scale);
      cs[half + i] = std::sin(theta * p.freq_scale);
      theta *= theta_scale;
    }
    return;
  }
  for (int64_t i = 0; i < half; ++i) {
    const double theta =
        pos * std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.rope_dim) / p.freq_factors[i] * p.freq_scale;
    cs[i] = static_cast<float>(std::cos(theta));
    cs[half + i] = static_cast<float>(std::sin(theta));
  }
}

}  // namespace

void rope(float* x, int64_t n_heads, int32_t pos, const RopeParams& p) {
  const int64_t half = p.rope_dim / 2;
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(2 * half)) buf.resize(static_cast<size_t>(2 * half));
  float* cs = buf.data();
  rope_angles(pos, p, cs);
  if (p.mscale != 1.0f)
    for (int64_t i = 0; i < 2 * half; ++i) cs[i] *= p.mscale;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * p.head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = p.type == RopeType::kNorm ? 2 * i : i;
      const int64_t b = p.type == RopeType::kNorm ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs[i] - x1 * cs[half + i];
      v[b] = x0 * cs[half + i] + x1 * cs[i];
    }
  }
}

}  // namespace kvik
