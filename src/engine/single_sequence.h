// One sequence run directly against the model with a contiguous block table: the reference path that the
// batched engine's outputs are compared with, and the simplest way to generate.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/llama.h"

namespace kvik {

class SingleSequence {
 public:
  SingleSequence(LlamaModel& model, int64_t max_len, DType kv_dtype = DType::F32, int32_t block_size = 16);

  // Appends tokens (prefill or decode) and returns logits for the last `n_logits` of them, [n_logits, V].
  // Throws kvik::Error when the sequence would exceed max_len.
  std::vector<float> append(std::span<const int32_t> tokens, int64_t n_logits = 1);
  int64_t length() const { return length_; }
  int64_t max_len() const { return max_len_; }
  void reset() { length_ = 0; }

 private:
  LlamaModel& model_;
  int64_t max_len_;
  int64_t length_ = 0;
  KvCacheTensors cache_;
  std::vector<int32_t> block_table_;
};

}  // namespace kvik
