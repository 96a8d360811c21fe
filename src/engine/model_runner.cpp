#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace kvik {

ModelRunner::ModelRunner(LlamaModel& model, KvCacheTensors& cache, int64_t max_num_batched_tokens, int64_t max_num_seqs,
                         int64_t max_model_len)
    : model_(model), cache_(cache), max_blocks_per_seq_((max_model_len + cache.block_size() - 1) / cache.block_size()) {
  token_ids_.resize(max_num_batched_tokens);
  positions_.resize(max_num_batched_tokens);
  slot_mapping_.resize(max_num_batched_tokens);
  interventions_.resize(max_num_batched_tokens);
  query_start_loc_.resize(max_num_seqs + 1);
  seq_lens_.resize(max_num_seqs);
  block_tables_.resize(max_num_seqs * max_blocks_per_seq_);
  logits_indices_.resize(max_num_seqs);
  logits_.resize(max_num_seqs * model.config().vocab_size);
}

const float* ModelRunner::execute(const SchedulerOutput& out, const KVCacheManager& kv,
                                  std::vector<Request*>& sample_reqs) {
  sample_reqs.clear();
  const int32_t bs = cache_.block_size();
  const int64_t R = static_cast<int64_t>(out.scheduled.size());
  if (out.total_num_scheduled_tokens > static_cast<int64_t>(token_ids_.size()) ||
      R > static_cast<int64_t>(seq_lens_.size()))
    fail("internal: step of {} tokens / {} requests exceeds the runner's buffers", out.total_num_scheduled_tokens, R);
  int64_t t = 0;
  bool any_interventions = false;
  query_start_loc_[0] = 0;
  for (int64_t r = 0; r < R; ++r) {
    Request& req = *out.scheduled[r].request;
    const int64_t n = out.scheduled[r].num_scheduled_tokens;
    const BlockTable& table = kv.block_table(req.request_id);
    if (table.size() > max_blocks_per_seq_)
      fail("internal: request '{}' holds {} blocks, more than max_model_len allows", req.request_id, table.size());
    table.copy_ids(&block_tables_[r * max_blocks_per_seq_]);
    const InterventionList* iv = req.sampling_params.interventions.get();
    any_interventions |= iv != nullptr;
    std::fill_n(interventions_.begin() + t, n, iv);
    for (int64_t i = 0; i < n; ++i, ++t) {
      const int64_t pos = req.num_computed_tokens + i;
      token_ids_[t] = req.all_token_ids[pos];
      positions_[t] = static_cast<int32_t>(pos);
      slot_mapping_[t] = table.slot(pos, bs);
    }
    query_start_loc_[r + 1] = static_cast<int32_t>(t);
    seq_lens_[r] = static_cast<int32_t>(req.num_computed_tokens + n);
    if (req.num_computed_tokens + n == req.num_tokens()) {
      logits_indices_[sample_reqs.size()] = static_cast<int32_t>(t - 1);
      sample_reqs.push_back(&req);
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
  b.logits_indices = {logits_indices_.data(), sample_reqs.size()};
  if (any_interventions) b.interventions = {interventions_.data(), static_cast<size_t>(t)};
  model_.forward(b, cache_, logits_.data());
  return logits_.data();
}

}  // namespace kvik
