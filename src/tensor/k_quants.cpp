// Reference K-quant conversions. Bit-exactness with llama.cpp needs the same float operations in the same order
// as its reference code (ggml-quants.c), so the arithmetic below is kept deliberately literal: no reordered
// sums, no fused multiply-adds (this file is compiled without -mfma).
#include "tensor/k_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace kvik {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, through the float mantissa (ggml's nearest_int); valid for |v| ≤ 2²²−1.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.f;  // 1.5·2²³
  int32_t i;
  std::memcpy(&i, &shifted, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Scale (and min) of one sub-block for the "x = scale·q − min" formats (Q4_K: nmax 15, Q5_K: 31). Starts from
// the min/max fit, then tries nstep+1 rescaled grids and keeps the one with the least weighted squared error,
// solving the 2×2 least-squares system for (scale, min) on each grid. Returns the scale, *neg_min = −min ≥ 0.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, uint8_t* Laux,
                    float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += w[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += w[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

// Scale of one symmetric sub-block (Q6_K: levels −nmax..nmax−1, weights x²): the max fit, then 18 nearby
// grids, keeping the one that maximises (Σw·x·l)²/Σw·l² (least squares). L gets the levels offset by +nmax.
float fit_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Packs 8 six-bit scales and mins into 12 bytes (the inverse of k_scale_min).
void pack_scale_min(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = ls[j];
      s[j + 4] = lm[j];
    } else {
      s[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per-sub-block fits, 6-bit scales and mins relative to the
// largest, then every element re-rounded against the stored (fp16, 6-bit) scales. L gets the levels.
template <typename Block>
void quantize_scale_min_block(const float* x, Block& y, uint8_t* L, int nmax, float rmin, float rdelta, int nstep) {
  float scales[kQK_K / 32], mins[kQK_K / 32], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = fit_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < kQK_K / 32; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  std::memset(y.scales, 0, sizeof(y.scales));
  pack_scale_min(ls, lm, y.scales);
  y.d = f32_to_fp16(max_scale / 63.f);
  y.dmin = f32_to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    k_scale_min(j, y.scales, sc, m);
    const float d = fp16_to_f32(y.d) * sc;
    if (!d) continue;
    const float dm = fp16_to_f32(y.dmin) * m;
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / d);
      L[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_scale_min_block(x, y[b], L, 15, -1.f, 0.1f, 20);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        y[b].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_scale_min_block(x, y[b], L, 31, -0.5f, 0.1f, 15);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[b].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[b].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
  }
}

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    int8_t L[kQK_K];
    float scales[kQK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      scales[j] = fit_scale_symmetric(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    BlockQ6_K& o = y[b];
    std::memset(&o, 0, sizeof(o));
    if (max_abs_scale < kGroupMaxEps) continue;  // all zero: d = 0
    const float iscale = -128.f / max_scale;
    o.d = f32_to_fp16(1 / iscale);
    for (int j = 0; j < kQK_K / 16; ++j)
      o.scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_f32(o.d) * o.scales[j];
      if (!d) continue;
      for (int i = 0; i < 16; ++i) {
        const int l = nearest_int(x[16 * j + i] / d);
        L[16 * j + i] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const int8_t* q = L + 128 * h + l;
        o.ql[64 * h + l] = static_cast<uint8_t>((q[0] & 0xF) | ((q[64] & 0xF) << 4));
        o.ql[64 * h + l + 32] = static_cast<uint8_t>((q[32] & 0xF) | ((q[96] & 0xF) << 4));
        o.qh[32 * h + l] =
            static_cast<uint8_t>((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
      }
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    BlockQ8_K& o = y[b];
    if (!amax) {
      std::memset(&o, 0, sizeof(o));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) o.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += o.qs[16 * j + i];
      o.bsums[j] = static_cast<int16_t>(sum);
    }
    o.d = 1 / iscale;
  }
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_f32(x[b].d), min = fp16_to_f32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      k_scale_min(2 * c, x[b].scales, sc, m);
      const float d1 = d * sc, m1 = min * m;
      k_scale_min(2 * c + 1, x[b].scales, sc, m);
      const float d2 = d * sc, m2 = min * m;
      const uint8_t* q = x[b].qs + 32 * c;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_f32(x[b].d), min = fp16_to_f32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      k_scale_min(2 * c, x[b].scales, sc, m);
      const float d1 = d * sc, m1 = min * m;
      k_scale_min(2 * c + 1, x[b].scales, sc, m);
      const float d2 = d * sc, m2 = min * m;
      const uint8_t* q = x[b].qs + 32 * c;
      const uint8_t u1 = static_cast<uint8_t>(1 << (2 * c)), u2 = static_cast<uint8_t>(2 << (2 * c));
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0xF) + (x[b].qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) + (x[b].qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_f32(x[b].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b)
    for (int j = 0; j < kQK_K; ++j) *y++ = x[b].d * x[b].qs[j];
}

}  // namespace kvik
