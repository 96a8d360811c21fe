#include "tensor/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "tensor/k_quants.h"
#include "tensor/quantize.h"

namespace kvik {
namespace {

constexpr std::array kTraits = {
    DTypeTraits{DType::F32, "f32", 1, 4, true},         DTypeTraits{DType::F16, "f16", 1, 2, true},
    DTypeTraits{DType::Q4_0, "q4_0", 32, 18, true},     DTypeTraits{DType::Q4_1, "q4_1", 32, 20, true},
    DTypeTraits{DType::Q5_0, "q5_0", 32, 22, true},     DTypeTraits{DType::Q5_1, "q5_1", 32, 24, true},
    DTypeTraits{DType::Q8_0, "q8_0", 32, 34, true},     DTypeTraits{DType::Q8_1, "q8_1", 32, 36, false},
    DTypeTraits{DType::Q2_K, "q2_K", 256, 84, false},   DTypeTraits{DType::Q3_K, "q3_K", 256, 110, false},
    DTypeTraits{DType::Q4_K, "q4_K", 256, 144, true},   DTypeTraits{DType::Q5_K, "q5_K", 256, 176, true},
    DTypeTraits{DType::Q6_K, "q6_K", 256, 210, true},   DTypeTraits{DType::Q8_K, "q8_K", 256, 292, false},
    DTypeTraits{DType::IQ4_NL, "iq4_nl", 32, 18, true}, DTypeTraits{DType::I8, "i8", 1, 1, false},
    DTypeTraits{DType::I16, "i16", 1, 2, false},        DTypeTraits{DType::I32, "i32", 1, 4, false},
    DTypeTraits{DType::I64, "i64", 1, 8, false},        DTypeTraits{DType::F64, "f64", 1, 8, false},
    DTypeTraits{DType::BF16, "bf16", 1, 2, true},       DTypeTraits{DType::F8_E4M3, "fp8_e4m3", 1, 1, false},
};

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == id && t.type != DType::F8_E4M3) return t;  // FP8: no GGUF id
  return std::nullopt;
}

const DTypeTraits& traits(DType t) {
  for (const auto& tr : kTraits)
    if (tr.type == t) return tr;
  fail("unknown dtype id {}", static_cast<uint32_t>(t));
}

std::string_view dtype_name(DType t) { return traits(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTraits) {
    if (t.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(t.name[i])) != std::tolower(static_cast<unsigned char>(name[i])))
        eq = false;
    if (eq) return t.type;
  }
  return std::nullopt;
}

std::optional<size_t> row_bytes(DType t, int64_t n) {
  const auto& tr = traits(t);
  if (n < 0 || n % tr.block_size != 0) return std::nullopt;
  return static_cast<size_t>(n / tr.block_size) * tr.block_bytes;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);  // n == 0 may come with null pointers
      return;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / kQK8_0; ++i) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < kQK8_0; ++j) dst[i * kQK8_0 + j] = static_cast<float>(b[i].qs[j]) * d;
      }
      return;
    }
    case DType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / kQK4_0; ++i) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          dst[i * kQK4_0 + j] = static_cast<float>((b[i].qs[j] & 0x0F) - 8) * d;
          dst[i * kQK4_0 + j + kQK4_0 / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case DType::Q4_1: return dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case DType::Q5_0: return dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case DType::Q5_1: return dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case DType::IQ4_NL: return dequantize_row_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n);
    case DType::Q4_K: return dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::Q5_K: return dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n);
    case DType::Q6_K: return dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::Q8_K: return dequantize_row_q8_k(static_cast<const BlockQ8_K*>(src), dst, n);
    default: fail("dequantize: no kernel for dtype {}", dtype_name(t));
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);  // n == 0 may come with null pointers
      return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::Q8_0: {
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t i = 0; i < n / kQK8_0; ++i) {
        const float* x = src + i * kQK8_0;
        float amax = 0.0f;
        for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
      }
      return;
    }
    case DType::Q4_0: {
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t i = 0; i < n / kQK4_0; ++i) {
        const float* x = src + i * kQK4_0;
        float amax = 0.0f, max = 0.0f;  // max keeps the sign of the element with the largest magnitude
        for (int j = 0; j < kQK4_0; ++j) {
          if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          const uint8_t lo = std::min<uint8_t>(15, static_cast<uint8_t>(static_cast<int8_t>(x[j] * id + 8.5f)));
          const uint8_t hi =
              std::min<uint8_t>(15, static_cast<uint8_t>(static_cast<int8_t>(x[j + kQK4_0 / 2] * id + 8.5f)));
          b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    }
    case DType::Q4_1: return quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n);
    case DType::Q5_0: return quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case DType::Q5_1: return quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n);
    case DType::IQ4_NL: return quantize_row_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n);
    case DType::Q4_K: return quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::Q5_K: return quantize_row_q5_k(src, static_cast<BlockQ5_K*>(dst), n);
    case DType::Q6_K: return quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n);
    case DType::Q8_K: return quantize_row_q8_k(src, static_cast<BlockQ8_K*>(dst), n);
    default: fail("quantize: no kernel for dtype {}", dtype_name(t));
  }
}

}  // namespace kvik
