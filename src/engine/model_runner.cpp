#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace kvik {

ModelRunner::ModelRunner(LlamaModel& model, KvCacheTensors& cache, int64_t max_num_batched_tokens, int64_t max_num_seqs,
                         int64_t max_model_len, int64_t max_logits_rows)
    : model_(model), cache_(cache), max_blocks_per_seq_((max_model_len + cache.block_size() - 1) / cache.block_size()) {
  token_ids_.resize(max_num_batched_tokens);
  positions_.resize(max_num_batched_tokens);
  slot_mapping_.resize(max_num_batched_tokens);
  interventions_.resize(max_num_batched_tokens);
  loras_.resize(max_num_batched_tokens);
  query_start_loc_.resize(max_num_seqs + 1);
  seq_lens_.resize(max_num_seqs);
  block_tables_.resize(max_num_seqs * max_blocks_per_seq_);
  logits_indices_.resize(max_logits_rows);
  logits_.resize(max_logits_rows * model.config().vocab_size);
}

const float* ModelRunner::execute(const SchedulerOutput& out, const KVCacheManager& kv,
                                  std::vector<SampleRows>& sample) {
  sample.clear();
  const int32_t bs = cache_.block_size();
  const int64_t R = static_cast<int64_t>(out.scheduled.size());
  if (out.total_num_scheduled_tokens > static_cast<int64_t>(token_ids_.size()) ||
      R > static_cast<int64_t>(seq_lens_.size()))
    fail("internal: step of {} tokens / {} requests exceeds the runner's buffers", out.total_num_scheduled_tokens, R);
  int64_t t = 0, num_rows = 0;
  bool any_interventions = false;
  bool any_lora = false;
  query_start_loc_[0] = 0;
  for (int64_t r = 0; r < R; ++r) {
    Request& req = *out.scheduled[r].request;
    const int64_t n = out.scheduled[r].num_scheduled_tokens;
    const int64_t num_spec = static_cast<int64_t>(req.spec_token_ids.size());
    const int64_t end = req.num_computed_tokens + n;  // positions computed after this step
    if (end > req.num_tokens() + num_spec)
      fail("internal: request '{}' scheduled past its last token and drafts", req.request_id);
    const BlockTable& table = kv.block_table(req.request_id);
    if (table.size() > max_blocks_per_seq_)
      fail("internal: request '{}' holds {} blocks, more than max_model_len allows", req.request_id, table.size());
    table.copy_ids(&block_tables_[r * max_blocks_per_seq_]);
    const InterventionList* iv = req.sampling_params.interventions.get();
    any_interventions |= iv != nullptr;
    std::fill_n(interventions_.begin() + t, n, iv);
    const LoraAdapter* lora = req.sampling_params.lora.get();
    any_lora |= lora != nullptr;
    std::fill_n(loras_.begin() + t, n, lora);
    for (int64_t i = 0; i < n; ++i, ++t) {
      const int64_t pos = req.num_computed_tokens + i;
      token_ids_[t] = pos < req.num_tokens() ? req.all_token_ids[pos] : req.spec_token_ids[pos - req.num_tokens()];
      positions_[t] = static_cast<int32_t>(pos);
      slot_mapping_[t] = table.slot(pos, bs);
    }
    query_start_loc_[r + 1] = static_cast<int32_t>(t);
    seq_lens_[r] = static_cast<int32_t>(end);
    if (end == req.num_tokens() + num_spec) {  // the last token (and every draft) computed: logits for each
      const int64_t rows = 1 + num_spec;
      if (num_rows + rows > static_cast<int64_t>(logits_indices_.size()))
        fail("internal: step needs more than {} logits rows", logits_indices_.size());
      sample.push_back({&req, num_rows, rows});
      for (int64_t i = 0; i < rows; ++i) logits_indices_[num_rows++] = static_cast<int32_t>(t - rows + i);
    }
  }
  // Copy-on-write copies first: this step's writes go into the copies.
  for (const BlockCopy& c : out.blocks_to_copy) cache_.copy_block(c.src, c.dst, c.num_slots);
  ForwardBatch b;
  b.token_ids = {token_ids_.data(), static_cast<size_t>(t)};
  b.positions = {positions_.data(), static_cast<size_t>(t)};
  b.slot_mapping = {slot_mapping_.data(), static_cast<size_t>(t)};
  b.query_start_loc = {query_start_loc_.data(), static_cast<size_t>(R + 1)};
  b.seq_lens = {seq_lens_.data(), static_cast<size_t>(R)};
  b.block_tables = {block_tables_.data(), static_cast<size_t>(R * max_blocks_per_seq_)};
  b.max_blocks_per_seq = static_cast<int32_t>(max_blocks_per_seq_);
  b.logits_indices = {logits_indices_.data(), static_cast<size_t>(num_rows)};
  if (any_interventions) b.interventions = {interventions_.data(), static_cast<size_t>(t)};
  if (any_lora) b.loras = {loras_.data(), static_cast<size_t>(t)};
  model_.forward(b, cache_, logits_.data());
  return logits_.data();
}

}  // namespace kvik
