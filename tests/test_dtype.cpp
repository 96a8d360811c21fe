// Element types: bit-exact Q8_0/Q4_0 dequantization of hand-made blocks, quantization matching ggml's reference
// algorithm, quantize→dequantize error bounds, and fp16/bf16 conversions (exhaustive and rounding cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "tensor/dtype.h"

namespace kvik {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Traits

TEST(DType, TraitsMatchGgml) {
  EXPECT_EQ(traits(DType::Q8_0).block_size, 32);
  EXPECT_EQ(traits(DType::Q8_0).block_bytes, 34u);
  EXPECT_EQ(traits(DType::Q4_0).block_bytes, 18u);
  EXPECT_EQ(traits(DType::BF16).block_bytes, 2u);
  EXPECT_EQ(*row_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(*row_bytes(DType::F16, 3), 6u);
  EXPECT_FALSE(row_bytes(DType::Q8_0, 33).has_value());
  EXPECT_FALSE(dtype_traits(4).has_value());  // Q4_2, removed from ggml
  EXPECT_EQ(dtype_traits(30)->type, DType::BF16);
  EXPECT_EQ(dtype_from_name("Q8_0"), DType::Q8_0);
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_FALSE(dtype_from_name("q9_0").has_value());
  EXPECT_EQ(dtype_name(DType::Q6_K), "q6_K");
}

// ---------------------------------------------------------------------------------------------------------------
// Hand-made blocks

TEST(DType, DequantizeQ8_0HandMadeBlocks) {
  BlockQ8_0 b[2];
  b[0].d = 0x3400;  // 0.25
  const int8_t q0[32] = {0,   1,   -1,   2,   -2,   3,   -3,   4,    -4, 8, -8, 16, -16, 32, -32, 64,
                         -64, 100, -100, 126, -126, 127, -127, -128, 5,  6, 7,  9,  10,  11, 12,  13};
  std::memcpy(b[0].qs, q0, 32);
  b[1].d = 0xB800;  // -0.5
  for (int j = 0; j < 32; ++j) b[1].qs[j] = static_cast<int8_t>(j - 16);
  const float expect0[32] = {0.0f,    0.25f,  -0.25f, 0.5f,  -0.5f, 0.75f,  -0.75f, 1.0f,   -1.0f, 2.0f,   -2.0f,
                             4.0f,    -4.0f,  8.0f,   -8.0f, 16.0f, -16.0f, 25.0f,  -25.0f, 31.5f, -31.5f, 31.75f,
                             -31.75f, -32.0f, 1.25f,  1.5f,  1.75f, 2.25f,  2.5f,   2.75f,  3.0f,  3.25f};
  const float expect1[32] = {8.0f,  7.5f,  7.0f,  6.5f,  6.0f,  5.5f,  5.0f,  4.5f,  4.0f,  3.5f,  3.0f,
                             2.5f,  2.0f,  1.5f,  1.0f,  0.5f,  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -2.5f,
                             -3.0f, -3.5f, -4.0f, -4.5f, -5.0f, -5.5f, -6.0f, -6.5f, -7.0f, -7.5f};
  float out[64];
  dequantize_row(DType::Q8_0, b, out, 64);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], expect0[j]) << j;
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[32 + j], expect1[j]) << j;
}

TEST(DType, DequantizeQ4_0HandMadeBlocks) {
  BlockQ4_0 b[2];
  b[0].d = 0x4000;  // 2.0; byte j holds element j (low nibble) and element j + 16 (high nibble)
  const uint8_t qs[16] = {0x08, 0x19, 0x2A, 0x3B, 0x4C, 0x5D, 0x6E, 0x7F,
                          0x80, 0x91, 0xA2, 0xB3, 0xC4, 0xD5, 0xE6, 0xF7};
  std::memcpy(b[0].qs, qs, 16);
  b[1].d = 0xB800;                 // -0.5
  std::memset(b[1].qs, 0xF0, 16);  // low nibbles 0 → -8·d = 4, high nibbles 15 → 7·d = -3.5
  const float expect0[32] = {0,   2,   4,   6,   8,  10, 12, 14, -16, -14, -12, -10, -8, -6, -4, -2,
                             -16, -14, -12, -10, -8, -6, -4, -2, 0,   2,   4,   6,   8,  10, 12, 14};
  float out[64];
  dequantize_row(DType::Q4_0, b, out, 64);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], expect0[j]) << j;
  for (int j = 0; j < 16; ++j) EXPECT_EQ(out[32 + j], 4.0f) << j;
  for (int j = 16; j < 32; ++j) EXPECT_EQ(out[32 + j], -3.5f) << j;
}

TEST(DType, DequantizePlainTypes) {
  const uint16_t h[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  float out[4];
  dequantize_row(DType::F16, h, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -24));
  const uint16_t b[3] = {0x3F80, 0xC040, 0x4049};
  dequantize_row(DType::BF16, b, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 3.140625f);
}

// ---------------------------------------------------------------------------------------------------------------
// Quantization: ggml's reference algorithm (quantize_row_q8_0_ref, quantize_row_q4_0_ref), restated here.

void ggml_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i * 32 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < 32; ++j) y[i].qs[j] = static_cast<int8_t>(roundf(x[i * 32 + j] * id));
  }
}

void ggml_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float v = x[i * 32 + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const float x0 = x[i * 32 + j] * id, x1 = x[i * 32 + 16 + j] * id;
      const uint8_t xi0 = std::min<int8_t>(15, static_cast<int8_t>(x0 + 8.5f));
      const uint8_t xi1 = std::min<int8_t>(15, static_cast<int8_t>(x1 + 8.5f));
      y[i].qs[j] = xi0 | static_cast<uint8_t>(xi1 << 4);
    }
  }
}

TEST(DType, QuantizeQ8_0HandCases) {
  // amax 127 → d = 1: q = roundf(x), halves away from zero.
  float x[32] = {127, -127, 63.5f, -63.5f, 2.5f, -2.5f, 0.5f, -0.5f, 0.49f, -0.49f, 1.5f, 0};
  for (int j = 12; j < 32; ++j) x[j] = static_cast<float>(j * 3 - 50);
  BlockQ8_0 b;
  quantize_row(DType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const int8_t expect[12] = {127, -127, 64, -64, 3, -3, 1, -1, 0, 0, 2, 0};
  for (int j = 0; j < 12; ++j) EXPECT_EQ(b.qs[j], expect[j]) << j;
  for (int j = 12; j < 32; ++j) EXPECT_EQ(b.qs[j], j * 3 - 50) << j;

  // amax 16 → d = 16/127 stored as fp16; q = roundf(x · 127/16).
  float y[32];
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(j - 16);
  quantize_row(DType::Q8_0, y, &b, 32);
  EXPECT_EQ(b.d, f32_to_fp16(16.0f / 127.0f));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[17], 8);    // 7.9375 → 8
  EXPECT_EQ(b.qs[20], 32);   // 31.75 → 32
  EXPECT_EQ(b.qs[31], 119);  // 119.0625 → 119

  // All zeros: d = 0 and q = 0, no division by zero.
  float z[32] = {};
  quantize_row(DType::Q8_0, z, &b, 32);
  EXPECT_EQ(b.d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], 0);
}

TEST(DType, QuantizeQ4_0HandCases) {
  // The largest magnitude is -8 → d = 1, q = min(15, (int8)(x + 8.5)).
  float x[32] = {-8, 7, 7.6f, 0, 0.49f, 0.5f, -0.5f, -0.51f, 3.2f, -3.7f, 100 * 0.f, 6.5f, -7.5f, 1, 2, -2};
  BlockQ4_0 b;
  quantize_row(DType::Q4_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const uint8_t lo[16] = {0, 15, 15, 8, 8, 9, 8, 7, 11, 4, 8, 15, 1, 9, 10, 6};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j] & 0x0F, lo[j]) << j;
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j] >> 4, 8) << j;  // elements 16..31 are zero

  // The largest magnitude is +16 → d = -2 (negative): x = 16 maps to q 0, x = -16 clamps to 15 (-14 after).
  float y[32] = {};
  y[0] = 16, y[16] = -16, y[1] = 3, y[17] = -3;
  quantize_row(DType::Q4_0, y, &b, 32);
  EXPECT_EQ(b.d, 0xC000);
  EXPECT_EQ(b.qs[0], 0x0F << 4 | 0x00);
  EXPECT_EQ(b.qs[1] & 0x0F, 7);  // 3 · -0.5 + 8.5 = 7
  EXPECT_EQ(b.qs[1] >> 4, 10);   // -3 · -0.5 + 8.5 = 10
  float out[32];
  dequantize_row(DType::Q4_0, &b, out, 32);
  EXPECT_EQ(out[0], 16.0f);
  EXPECT_EQ(out[16], -14.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[17], -4.0f);

  float z[32] = {};
  quantize_row(DType::Q4_0, z, &b, 32);
  EXPECT_EQ(b.d, 0x8000);  // 0 / -8 = -0, as in ggml
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], 0x88);
}

std::vector<float> random_row(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  // A few blocks of special shape: constant, one spike, all negative.
  if (n >= 128) {
    std::fill(v.begin(), v.begin() + 32, 0.75f * scale);
    v[40] = 50 * scale;
    for (int j = 64; j < 96; ++j) v[j] = -std::fabs(v[j]);
  }
  return v;
}

TEST(DType, QuantizeMatchesGgmlReferenceOnRandomRows) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int64_t n = 32 * (4 + seed % 7);
    const auto x = random_row(n, seed, seed % 2 ? 0.02f : 3.0f);
    std::vector<BlockQ8_0> q8(n / 32), r8(n / 32);
    quantize_row(DType::Q8_0, x.data(), q8.data(), n);
    ggml_q8_0(x.data(), r8.data(), n);
    EXPECT_EQ(std::memcmp(q8.data(), r8.data(), q8.size() * sizeof(BlockQ8_0)), 0) << seed;
    std::vector<BlockQ4_0> q4(n / 32), r4(n / 32);
    quantize_row(DType::Q4_0, x.data(), q4.data(), n);
    ggml_q4_0(x.data(), r4.data(), n);
    EXPECT_EQ(std::memcmp(q4.data(), r4.data(), q4.size() * sizeof(BlockQ4_0)), 0) << seed;
  }
}

TEST(DType, QuantizeDequantizeErrorBounds) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const int64_t n = 32 * 16;
    const auto x = random_row(n, seed, 1.0f);
    std::vector<float> y(n);

    std::vector<BlockQ8_0> q8(n / 32);
    quantize_row(DType::Q8_0, x.data(), q8.data(), n);
    dequantize_row(DType::Q8_0, q8.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      // Half a step of d = amax/127, plus d's own fp16 rounding (relative 2^-11) times |q| ≤ 127.
      const float bound = amax / 127.0f * 0.5f + amax * 0x1.0p-11f + 1e-7f;
      for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound) << b << " " << j;
    }

    std::vector<BlockQ4_0> q4(n / 32);
    quantize_row(DType::Q4_0, x.data(), q4.data(), n);
    dequantize_row(DType::Q4_0, q4.data(), y.data(), n);
    double se = 0, sx = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      // Steps of |d| = amax/8: half a step, except that +8·|d| (opposite sign to the max) clamps to 7·|d|.
      const float d = amax / 8.0f;
      for (int j = 0; j < 32; ++j) {
        const float e = std::fabs(x[b * 32 + j] - y[b * 32 + j]);
        EXPECT_LE(e, d * 1.0f + amax * 0x1.0p-10f + 1e-7f) << b << " " << j;
        se += double(e) * e;
        sx += double(x[b * 32 + j]) * x[b * 32 + j];
      }
    }
    EXPECT_LT(std::sqrt(se / sx), 0.15) << "relative RMS error of q4_0";
  }
}

TEST(DType, F16AndBf16QuantizeRowsRoundTrip) {
  const auto x = random_row(256, 7, 1.0f);
  std::vector<uint16_t> h(256);
  std::vector<float> y(256);
  quantize_row(DType::F16, x.data(), h.data(), 256);
  dequantize_row(DType::F16, h.data(), y.data(), 256);
  for (int j = 0; j < 256; ++j) EXPECT_LE(std::fabs(x[j] - y[j]), std::fabs(x[j]) * 0x1.0p-11f + 1e-7f);
  quantize_row(DType::BF16, x.data(), h.data(), 256);
  dequantize_row(DType::BF16, h.data(), y.data(), 256);
  for (int j = 0; j < 256; ++j) EXPECT_LE(std::fabs(x[j] - y[j]), std::fabs(x[j]) * 0x1.0p-8f);
}

// ---------------------------------------------------------------------------------------------------------------
// fp16 / bf16

// IEEE half decoded from its fields, independently of the bit trick in fp16.h.
float half_reference(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? std::nanf("") : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  return sign ? -v : v;
}

TEST(Fp16, AllHalfValuesRoundTripExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = fp16_to_f32(h);
    const float ref = half_reference(h);
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      const uint16_t back = f32_to_fp16(f);
      EXPECT_EQ(back & 0x7C00, 0x7C00) << std::hex << i;
      EXPECT_NE(back & 0x3FF, 0) << std::hex << i << " NaN must stay NaN";
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
    } else {
      ASSERT_EQ(f32_to_bits(f), f32_to_bits(ref)) << std::hex << i;  // also keeps -0
      ASSERT_EQ(f32_to_fp16(f), h) << std::hex << i;
    }
  }
}

TEST(Fp16, F32ToF16RoundsToNearestEven) {
  const float ulp1 = 0x1.0p-10f;  // spacing of halves in [1, 2)
  struct Case {
    float f;
    uint16_t h;
  };
  const Case cases[] = {
      {1.0f, 0x3C00},
      {1.0f + ulp1 / 2, 0x3C00},                  // tie → even (0x3C00)
      {1.0f + ulp1 * 1.5f, 0x3C02},               // tie → even (0x3C02)
      {1.0f + ulp1 / 2 + 0x1.0p-20f, 0x3C01},     // just above the tie
      {1.0f + ulp1 * 1.5f - 0x1.0p-20f, 0x3C01},  // just below the tie
      {-1.0f - ulp1 / 2, 0xBC00},
      {0.1f, 0x2E66},
      {-2.0f, 0xC000},
      {65504.0f, 0x7BFF},   // largest half
      {65519.99f, 0x7BFF},  // below the tie with 65536
      {65520.0f, 0x7C00},   // tie → even, which is the infinity pattern
      {1e10f, 0x7C00},
      {-1e10f, 0xFC00},
      {INFINITY, 0x7C00},
      {-INFINITY, 0xFC00},
      {0x1.0p-14f, 0x0400},  // smallest normal
      {0x1.0p-24f, 0x0001},  // smallest subnormal
      {0x1.0p-25f, 0x0000},  // tie between 0 and the smallest subnormal → 0
      {0x1.0p-25f * 1.0001f, 0x0001},
      {0x1.0p-25f * 3, 0x0002},  // tie between 1 and 2 subnormal units → 2
      {0x1.0p-25f * 5, 0x0002},  // tie between 2 and 3 → 2
      {0x1.0p-26f, 0x0000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
  };
  for (const auto& c : cases) EXPECT_EQ(f32_to_fp16(c.f), c.h) << c.f;
  EXPECT_EQ(f32_to_fp16(std::nanf("")) & 0x7E00, 0x7E00);
  EXPECT_EQ(f32_to_fp16(bits_to_f32(0x7F800001u)) & 0x7E00, 0x7E00);  // signalling NaN → NaN
}

TEST(Bf16, AllBf16ValuesRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(h);
    ASSERT_EQ(f32_to_bits(f), i << 16);
    if (std::isnan(f)) {
      const uint16_t back = f32_to_bf16(f);
      EXPECT_EQ(back & 0x7F80, 0x7F80) << std::hex << i;
      EXPECT_NE(back & 0x7F, 0) << std::hex << i;
    } else {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << i;
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  struct Case {
    uint32_t f;
    uint16_t h;
  };
  const Case cases[] = {
      {0x3F800000u, 0x3F80},                         // 1.0
      {0x3F808000u, 0x3F80},                         // tie → even
      {0x3F818000u, 0x3F82},                         // tie → even
      {0x3F808001u, 0x3F81},                         // above the tie
      {0x3F817FFFu, 0x3F81},                         // below the tie
      {0xBF808001u, 0xBF81}, {0x7F7FFFFFu, 0x7F80},  // largest float rounds to infinity
      {0x7F800000u, 0x7F80},                         // inf
      {0xFF800000u, 0xFF80},                         // -inf
      {0x80000000u, 0x8000},                         // -0
      {0x00000001u, 0x0000},                         // tiny subnormal → 0
      {0x00008000u, 0x0000},                         // tie → even (0)
      {0x00018000u, 0x0002},                         // tie → even
      {0x40490FDBu, 0x4049},                         // pi → 3.140625
      {0x7FC00000u, 0x7FC0},                         // quiet NaN
      {0x7F800001u, 0x7FC0},                         // signalling NaN: quieted, not rounded into infinity
      {0xFF800001u, 0xFFC0},
  };
  for (const auto& c : cases) EXPECT_EQ(f32_to_bf16(bits_to_f32(c.f)), c.h) << std::hex << c.f;
}

}  // namespace
}  // namespace kvik
