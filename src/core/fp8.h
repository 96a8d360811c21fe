// FP8 E4M3 ("e4m3fn", the KV cache format of vLLM's --kv-cache-dtype fp8): 1 sign, 4 exponent (bias 7) and
// 3 mantissa bits, no infinities, largest finite ±448, subnormals down to 2^-9, NaN = 0x7F / 0xFF.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace kvik {

constexpr float kFp8E4M3Max = 448.0f;

// Round to nearest even, saturating to ±448 as vLLM does before its conversion; NaN stays NaN.
inline uint8_t f32_to_fp8_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fmin(std::fabs(x), kFp8E4M3Max);
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));  // subnormal (8 = 2^-6 exactly)
  int e = 0;
  std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1): the leading bit is 2^(e−1)
  const int exp = e - 1;
  int m = static_cast<int>(std::nearbyint((std::ldexp(a, -exp) - 1.0f) * 8.0f));
  int field = exp + 7;
  if (m == 8) m = 0, ++field;
  return sign | static_cast<uint8_t>(field << 3 | m);
}

inline float fp8_e4m3_to_f32_slow(uint8_t b) {
  const int field = (b >> 3) & 0xF, m = b & 7;
  float v;
  if (field == 15 && m == 7)
    v = NAN;
  else if (field == 0)
    v = std::ldexp(static_cast<float>(m), -9);
  else
    v = std::ldexp(1.0f + m / 8.0f, field - 7);
  return b & 0x80 ? -v : v;
}

// All 256 values, for table lookups in the kernels.
inline const std::array<float, 256>& fp8_e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> r{};
    for (int i = 0; i < 256; ++i) r[i] = fp8_e4m3_to_f32_slow(static_cast<uint8_t>(i));
    return r;
  }();
  return t;
}
inline float fp8_e4m3_to_f32(uint8_t b) { return fp8_e4m3_table()[b]; }

}  // namespace kvik
