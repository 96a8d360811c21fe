#include "engine/single_sequence.h"

#include <numeric>

#include "core/error.h"

namespace kvik {

SingleSequence::SingleSequence(LlamaModel& model, int64_t max_len, DType kv_dtype, int32_t block_size)
    : model_(model),
      max_len_(max_len),
      cache_(model.config(), (max_len + block_size - 1) / block_size, block_size, kv_dtype),
      block_table_(static_cast<size_t>(cache_.num_blocks())) {
  // The other ranks of a parallel job follow ModelRunner's steps only: a forward pass of rank 0's own would wait
  // on them forever.
  if (model.shard().distributed())
    fail("this runs one sequence in one process (traces, interpretability); start kvik without mpirun for it");
  std::iota(block_table_.begin(), block_table_.end(), 0);
}

std::vector<float> SingleSequence::append(std::span<const int32_t> tokens, int64_t n_logits) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (length_ + T > max_len_) fail("sequence of {} tokens exceeds the context length {}", length_ + T, max_len_);
  if (n_logits > T) n_logits = T;
  std::vector<int32_t> positions(T), logits_indices(n_logits);
  std::vector<int64_t> slots(T);
  for (int64_t t = 0; t < T; ++t) {
    positions[t] = static_cast<int32_t>(length_ + t);
    slots[t] = length_ + t;  // block i holds positions [16i, 16i+16) and block_table[i] = i
  }
  for (int64_t i = 0; i < n_logits; ++i) logits_indices[i] = static_cast<int32_t>(T - n_logits + i);
  const int32_t qsl[2] = {0, static_cast<int32_t>(T)};
  const int32_t seq_lens[1] = {static_cast<int32_t>(length_ + T)};
  ForwardBatch b;
  b.token_ids = tokens;
  b.positions = positions;
  b.slot_mapping = slots;
  b.query_start_loc = qsl;
  b.seq_lens = seq_lens;
  b.block_tables = block_table_;
  b.max_blocks_per_seq = static_cast<int32_t>(block_table_.size());
  b.logits_indices = logits_indices;
  std::vector<const InterventionList*> per_token;
  if (interventions_) {
    per_token.assign(static_cast<size_t>(T), interventions_.get());
    b.interventions = per_token;
  }
  b.observe = observe_;
  std::vector<const LoraAdapter*> loras;
  if (lora_) {
    loras.assign(static_cast<size_t>(T), lora_.get());
    b.loras = loras;
  }
  std::vector<float> logits(static_cast<size_t>(n_logits * model_.config().vocab_size));
  model_.forward(b, cache_, logits.data());
  length_ += T;
  return logits;
}

}  // namespace kvik
