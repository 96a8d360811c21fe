// One sequence run directly against the model with a contiguous block table: the reference path that the
// batched engine's outputs are compared with, and the simplest way to generate.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
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
  // Forgets every position from `len` on (their KV is overwritten by later appends): speculative decoding's draft
  // model rolls back its rejected drafts this way.
  void truncate(int64_t len) { length_ = std::min(length_, std::max<int64_t>(len, 0)); }
  int64_t max_len() const { return max_len_; }
  void reset() { length_ = 0; }
  // Interventions on every token appended from now on (nullptr = none), and an observer of the residual
  // stream (ForwardBatch::observe) for the steps that follow.
  void set_interventions(std::shared_ptr<const InterventionList> iv) { interventions_ = std::move(iv); }
  void set_observer(std::function<void(int32_t layer, const float* x, int64_t T)> f) { observe_ = std::move(f); }
  // The LoRA adapter every token appended from now on runs under (nullptr = the base model).
  void set_lora(std::shared_ptr<const LoraAdapter> lora) { lora_ = std::move(lora); }

 private:
  LlamaModel& model_;
  int64_t max_len_;
  int64_t length_ = 0;
  KvCacheTensors cache_;
  std::vector<int32_t> block_table_;
  std::shared_ptr<const InterventionList> interventions_;
  std::shared_ptr<const LoraAdapter> lora_;
  std::function<void(int32_t, const float*, int64_t)> observe_;
};

}  // namespace kvik
