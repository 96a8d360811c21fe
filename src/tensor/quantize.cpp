// The 32-element quantizers follow ggml's reference code operation for operation (same float expressions in the
// same order, same float→int conversions), which is what makes their bytes identical to llama-quantize's.
#include "tensor/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"

namespace kvik {
namespace {

constexpr int kQK = 32;

struct MinMax {
  float min, max;
};
MinMax min_max(const float* x) {
  MinMax r{FLT_MAX, -FLT_MAX};
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < r.min) r.min = x[j];
    if (x[j] > r.max) r.max = x[j];
  }
  return r;
}

// The element of largest magnitude with its sign (the first one on ties), as ggml's Q4_0/Q5_0 find it.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void set_fifth_bit(uint8_t* qh, int j, int q) {
  qh[j / 8] = static_cast<uint8_t>(qh[j / 8] | (((q >> 4) & 1) << (j % 8)));
}

// ggml's best_index_int8: the nearest codebook entry (ties go up), values sorted.
int nearest_iq4(float x) {
  const int8_t* v = kIQ4NLValues;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[mid])
      hi = mid;
    else
      lo = mid;
  }
  return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

// Σ w·q·x and Σ w·q² of a block quantized with inverse scale id (w = x²), the codes left in L.
void iq4_fit(const float* x, const float* w, float id, uint8_t* L, float& sumqx, float& sumq2) {
  sumqx = sumq2 = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const int l = nearest_iq4(id * x[j]);
    if (L) L[j] = static_cast<uint8_t>(l);
    const float q = kIQ4NLValues[l];
    sumqx += w[j] * q * x[j];
    sumq2 += w[j] * q * q;
  }
}

// One IQ4_NL block: the scale of the absmax fit, then 15 candidate scales around it; the best least-squares
// scale wins and the codes are recomputed with it (the float scale, not the fp16 one that is stored).
void quantize_block_iq4_nl(const float* x, BlockIQ4_NL& y) {
  float w[kQK];
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    w[j] = x[j] * x[j];
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  }
  float d = 0.0f;
  if (!(amax < 1e-15f)) {
    float sumqx, sumq2;
    iq4_fit(x, w, 1.0f / (-max / kIQ4NLValues[0]), nullptr, sumqx, sumq2);
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; ++itry) {
      iq4_fit(x, w, static_cast<float>(itry + kIQ4NLValues[0]) / max, nullptr, sumqx, sumq2);
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) d = sumqx / sumq2, best = d * sumqx;
    }
  }
  y.d = f32_to_fp16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t L[kQK];
  for (int j = 0; j < kQK; ++j) L[j] = static_cast<uint8_t>(nearest_iq4(id * x[j]));
  for (int j = 0; j < 16; ++j) y.qs[j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

}  // namespace

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const auto [min, max] = min_max(x);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(min);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>((x[16 + j] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(lo) | static_cast<uint8_t>(hi << 4));
    }
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
      const int hi = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 16.5f))));
      y[i].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      set_fifth_bit(y[i].qh, j, lo);
      set_fifth_bit(y[i].qh, 16 + j, hi);
    }
  }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const auto [min, max] = min_max(x);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(min);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int j = 0; j < 16; ++j) {
      // float → uint8 as the C code converts it: through a 32-bit integer, keeping the low byte
      const int lo = static_cast<uint8_t>(static_cast<int32_t>((x[j] - min) * id + 0.5f));
      const int hi = static_cast<uint8_t>(static_cast<int32_t>((x[16 + j] - min) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      set_fifth_bit(y[i].qh, j, lo);
      set_fifth_bit(y[i].qh, 16 + j, hi);
    }
  }
}

void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) quantize_block_iq4_nl(x + i * kQK, y[i]);
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q4_1_quant(x[i], j)) * d + m;
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_0_quant(x[i], j)) * d;
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_1_quant(x[i], j)) * d + m;
  }
}

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(iq4_nl_quant(x[i], j));
  }
}

bool can_quantize(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

namespace {

size_t checked_row_bytes(DType t, int64_t n_per_row, const char* what) {
  const auto rb = row_bytes(t, n_per_row);
  if (!rb)
    fail("{}: rows of {} elements do not divide into {} blocks of {}", what, n_per_row, dtype_name(t),
         traits(t).block_size);
  return *rb;
}

// Rows per task: enough elements per task (~64 Ki) that scheduling costs nothing next to the quantizer.
int64_t rows_per_task(int64_t n_per_row) {
  return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, n_per_row));
}

template <typename Fn>
void for_row_chunks(int64_t nrows, int64_t n_per_row, Fn&& fn) {
  const int64_t chunk = rows_per_task(n_per_row);
  const int64_t tasks = (nrows + chunk - 1) / chunk;
  if (tasks <= 1) return fn(int64_t{0}, nrows);
  ThreadPool::global().parallel_for_dynamic(
      tasks, 1, [&](int64_t t0, int64_t t1) { fn(t0 * chunk, std::min(nrows, t1 * chunk)); });
}

}  // namespace

void quantize_rows(DType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row) {
  if (!can_quantize(t)) fail("quantize: kvik cannot write {} tensors", dtype_name(t));
  const size_t rb = checked_row_bytes(t, n_per_row, "quantize");
  auto* out = static_cast<uint8_t*>(dst);
  for_row_chunks(nrows, n_per_row, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      quantize_row(t, src + r * n_per_row, out + static_cast<size_t>(r) * rb, n_per_row);
  });
}

void dequantize_rows(DType t, const void* src, float* dst, int64_t nrows, int64_t n_per_row) {
  const size_t rb = checked_row_bytes(t, n_per_row, "dequantize");
  const auto* in = static_cast<const uint8_t*>(src);
  for_row_chunks(nrows, n_per_row, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      dequantize_row(t, in + static_cast<size_t>(r) * rb, dst + r * n_per_row, n_per_row);
  });
}

void fake_quantize_rows(DType t, float* x, int64_t nrows, int64_t n_per_row) {
  if (!can_quantize(t)) fail("fake quantization: kvik cannot write {} tensors", dtype_name(t));
  const size_t rb = checked_row_bytes(t, n_per_row, "fake quantization");
  for_row_chunks(nrows, n_per_row, [&](int64_t r0, int64_t r1) {
    std::vector<uint8_t> tmp(rb);
    for (int64_t r = r0; r < r1; ++r) {
      quantize_row(t, x + r * n_per_row, tmp.data(), n_per_row);
      dequantize_row(t, tmp.data(), x + r * n_per_row, n_per_row);
    }
  });
}

}  // namespace kvik
