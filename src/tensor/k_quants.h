// K-quants: 256-element super-blocks with per-sub-block scales (ggml's Q4_K, Q5_K, Q6_K and the Q8_K
// activations they pair with). Block layouts are bit-exact with ggml's; the reference quantizers follow
// llama.cpp's *_ref quantizers (what llama-quantize uses without an importance matrix), the dequantizers
// ggml's dequantize_row_* — the same float operations in the same order, so results are bit-exact.
#pragma once

#include <cstdint>

namespace kvik {

constexpr int kQK_K = 256;
constexpr int kKScaleBytes = 12;  // 8 six-bit scales and 8 six-bit mins, packed

// x = d·sc_j·q − dmin·m_j for sub-block j (32 elements), q in 0..15.
struct BlockQ4_K {
  uint16_t d;                    // fp16 super-block scale of the scales
  uint16_t dmin;                 // fp16 super-block scale of the mins
  uint8_t scales[kKScaleBytes];  // sc_j, m_j (6 bits each); see k_scale_min()
  uint8_t qs[kQK_K / 2];         // 64-element chunk c: low nibbles = sub-block 2c, high nibbles = 2c + 1
};
static_assert(sizeof(BlockQ4_K) == 144);

// As Q4_K with a fifth bit: q in 0..31, bit (2c) / (2c+1) of qh[l] for chunk c's low / high nibble.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// x = d·sc_j·(q − 32) for sub-block j (16 elements), q in 0..63: 4 low bits in ql, 2 high bits in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activations for the K-quant dot products: x = d·q, plus the sums of each 16 quants (for the min/offset terms).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) from the packed 12 bytes.
inline void k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Element e (0..255) of a block as its integer quant (before scales).
inline int q4_k_quant(const BlockQ4_K& b, int e) {
  const uint8_t v = b.qs[(e / 64) * 32 + e % 32];
  return (e % 64) < 32 ? (v & 0xF) : (v >> 4);
}
inline int q5_k_quant(const BlockQ5_K& b, int e) {
  const int c = e / 64, hi = (e % 64) >= 32, l = e % 32;
  const uint8_t v = b.qs[c * 32 + l];
  return (hi ? v >> 4 : v & 0xF) | (((b.qh[l] >> (2 * c + hi)) & 1) << 4);
}
inline int q6_k_quant(const BlockQ6_K& b, int e) {
  const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
  const uint8_t* ql = b.ql + 64 * half;
  const uint8_t* qh = b.qh + 32 * half;
  const int low = quarter == 0   ? (ql[l] & 0xF)
                  : quarter == 1 ? (ql[l + 32] & 0xF)
                  : quarter == 2 ? (ql[l] >> 4)
                                 : (ql[l + 32] >> 4);
  return low | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n);

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);

}  // namespace kvik
