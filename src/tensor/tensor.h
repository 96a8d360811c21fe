// Non-owning views of weights. A weight matrix is `rows` output features, each a contiguous row of `cols`
// input features in `dtype` (GGUF shape [cols, rows]; PyTorch's [out, in]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace kvik {

struct WeightMatrix {
  DType dtype = DType::F32;
  int64_t rows = 0;  // out features
  int64_t cols = 0;  // in features
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  // The same rows repacked at load for the row-parallel kernels (kernels/cpu/packed.h), or null: groups of 16
  // rows, packed_group_bytes each. `data` stays valid (embedding lookups read it).
  const uint8_t* packed = nullptr;
  size_t packed_group_bytes = 0;
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// Rows [first, first + n) of a matrix, as a matrix of its own (Phi-3's fused qkv, a tensor-parallel shard): no copy.
inline WeightMatrix rows_of(const WeightMatrix& w, int64_t first, int64_t n) {
  return WeightMatrix{w.dtype, n, w.cols, w.data + static_cast<size_t>(first) * w.row_bytes, w.row_bytes};
}

}  // namespace kvik
