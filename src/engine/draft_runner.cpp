#include "engine/draft_runner.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "engine/sample/logits_ops.h"

namespace kvik {

DraftRunner::DraftRunner(LlamaModel& draft, KvCacheTensors& cache, int64_t max_num_batched_tokens, int64_t max_num_seqs,
                         int64_t max_model_len)
    : model_(draft),
      cache_(cache),
      max_tokens_(std::max(max_num_batched_tokens, max_num_seqs)),
      batch_(max_tokens_, max_num_seqs, (max_model_len + cache.block_size() - 1) / cache.block_size(), max_num_seqs) {
  logits_.resize(max_num_seqs * draft.config().vocab_size);
}

// Positions past the request's tokens hold its proposals so far (the draft's input while it extends them).
int32_t DraftRunner::token_at(const Request& r, int64_t pos) const {
  return pos < r.num_tokens() ? r.all_token_ids[static_cast<size_t>(pos)]
                              : r.spec_token_ids[static_cast<size_t>(pos - r.num_tokens())];
}

void DraftRunner::run(const std::vector<Job>& jobs, const std::vector<Row>& rows, const KVCacheManager& kv) {
  const int32_t bs = cache_.block_size();
  int64_t t = 0, n_logits = 0;
  batch_.query_start_loc[0] = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const Request& req = *jobs[row.job].request;
    const BlockTable& table = kv.block_table(req.request_id);
    if ((row.start + row.len + bs - 1) / bs > table.size())
      fail("internal: request '{}' has no block for draft position {}", req.request_id, row.start + row.len - 1);
    table.copy_ids(&batch_.block_tables[r * batch_.max_blocks_per_seq]);
    for (int64_t i = 0; i < row.len; ++i, ++t) {
      const int64_t pos = row.start + i;
      batch_.token_ids[t] = token_at(req, pos);
      batch_.positions[t] = static_cast<int32_t>(pos);
      batch_.slot_mapping[t] = table.slot(pos, bs);
    }
    batch_.query_start_loc[r + 1] = static_cast<int32_t>(t);
    batch_.seq_lens[r] = static_cast<int32_t>(row.start + row.len);
    if (row.logits) batch_.logits_indices[n_logits++] = static_cast<int32_t>(t - 1);
  }
  model_.forward(batch_.view(t, static_cast<int64_t>(rows.size()), n_logits), cache_, logits_.data());
  const auto V = static_cast<size_t>(model_.config().vocab_size);
  argmax_.resize(static_cast<size_t>(n_logits));
  for (size_t i = 0; i < argmax_.size(); ++i) argmax_[i] = argmax(std::span<const float>(logits_.data() + i * V, V));
}

void DraftRunner::propose(const std::vector<Job>& jobs, const KVCacheManager& kv) {
  // Catch-up: each request's tokens from the first its draft KV does not match (at least its last token, whose
  // logits give the first proposal), in passes of at most max_tokens_ tokens.
  std::vector<int64_t> next(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    Request& r = *jobs[j].request;
    r.spec_token_ids.clear();
    std::vector<int32_t>& fed = r.draft_fed;
    size_t keep = 0;
    while (keep < fed.size() && keep + 1 < r.all_token_ids.size() && fed[keep] == r.all_token_ids[keep]) ++keep;
    fed.resize(keep);
    next[j] = static_cast<int64_t>(keep);
  }
  std::vector<Row> rows;
  for (bool pending = true; pending;) {
    rows.clear();
    int64_t budget = max_tokens_;
    pending = false;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int64_t left = jobs[j].request->num_tokens() - next[j];
      if (left <= 0) continue;
      if (budget == 0) {
        pending = true;
        continue;
      }
      const int64_t len = std::min(left, budget);
      rows.push_back({j, next[j], len, len == left});
      budget -= len, next[j] += len;
      pending |= len < left;
    }
    if (rows.empty()) break;
    run(jobs, rows, kv);
    size_t a = 0;
    for (const Row& row : rows)
      if (row.logits) jobs[row.job].request->spec_token_ids.push_back(argmax_[a++]);
  }
  // Extension: one token per pass for the requests that want more proposals.
  for (int32_t i = 1;; ++i) {
    rows.clear();
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].k > i) rows.push_back({j, jobs[j].request->num_tokens() + i - 1, 1, true});
    if (rows.empty()) break;
    run(jobs, rows, kv);
    for (size_t a = 0; a < rows.size(); ++a) jobs[rows[a].job].request->spec_token_ids.push_back(argmax_[a]);
  }
  for (const Job& job : jobs) {  // what the draft KV now holds: the tokens, then the proposals but the last
    Request& r = *job.request;
    r.draft_fed.insert(r.draft_fed.end(), r.all_token_ids.begin() + static_cast<std::ptrdiff_t>(r.draft_fed.size()),
                       r.all_token_ids.end());
    r.draft_fed.insert(r.draft_fed.end(), r.spec_token_ids.begin(), r.spec_token_ids.end() - 1);
  }
}

}  // namespace kvik
