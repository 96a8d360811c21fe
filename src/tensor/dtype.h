// Element types of weights and activations, numbered as GGUF/ggml number them, and the block layouts of the
// quantized ones. One traits table describes every type; kernels dispatch on it in exactly one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvik {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  F8_E4M3 = 1024,  // kvik's own id, not a GGUF type: the FP8 KV cache (core/fp8.h)
};

struct DTypeTraits {
  DType type;
  std::string_view name;  // as llama.cpp prints it: "f32", "q8_0", "q4_K"
  int64_t block_size;     // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool can_compute;       // kvik has kernels for it (others load for inspection only)
};

// Traits of a GGUF type id, or nullopt for an id kvik does not know.
std::optional<DTypeTraits> dtype_traits(uint32_t id);
const DTypeTraits& traits(DType t);  // for a known DType
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);  // "f32", "q4_0", ... (case-insensitive)

// Bytes of a row of n elements; nullopt when n is not a multiple of the block size.
std::optional<size_t> row_bytes(DType t, int64_t n);

// Quantized block layouts (bit-exact with ggml's).
constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  uint16_t d;         // fp16 scale
  int8_t qs[kQK8_0];  // x = d * q
};
static_assert(sizeof(BlockQ8_0) == 34);

constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  uint16_t d;              // fp16 scale
  uint8_t qs[kQK4_0 / 2];  // low nibbles: elements 0..15, high nibbles: 16..31; x = d * (q - 8)
};
static_assert(sizeof(BlockQ4_0) == 18);

// The other 32-element block types (layouts bit-exact with ggml's; quantizers in tensor/quantize.h).
struct BlockQ4_1 {
  uint16_t d, m;   // fp16 scale and minimum: x = d * q + m, q in 0..15
  uint8_t qs[16];  // as Q4_0: low nibbles elements 0..15, high nibbles 16..31
};
static_assert(sizeof(BlockQ4_1) == 20);
struct BlockQ5_0 {
  uint16_t d;      // x = d * (q - 16), q in 0..31
  uint8_t qh[4];   // bit j of the little-endian u32 = fifth bit of element j
  uint8_t qs[16];  // low four bits as Q4_0
};
static_assert(sizeof(BlockQ5_0) == 22);
struct BlockQ5_1 {
  uint16_t d, m;  // x = d * q + m, q in 0..31
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);
// IQ4_NL: x = d * kIQ4NLValues[q], a non-uniform 16-level codebook (denser near zero, like NF4).
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];  // nibble order as Q4_0
};
static_assert(sizeof(BlockIQ4_NL) == 18);
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Reference (scalar) conversions. n must be a multiple of the block size. K-quant blocks: tensor/k_quants.h.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// quantize_row: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q4_K Q5_K Q6_K Q8_K, each as llama-quantize writes it
// without an importance matrix (tensor/quantize.h).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace kvik
