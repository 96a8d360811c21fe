#include "engine/model_runner.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/log.h"

namespace kvik {

ModelRunner::ModelRunner(LlamaModel& model, KvCacheTensors& cache, int64_t max_num_batched_tokens, int64_t max_num_seqs,
                         int64_t max_model_len, int64_t max_logits_rows)
    : model_(model),
      cache_(cache),
      batch_(max_num_batched_tokens, max_num_seqs, (max_model_len + cache.block_size() - 1) / cache.block_size(),
             max_logits_rows) {
  if (cache.local_num_blocks() > 0) {  // the local layers' own tables and slots
    batch_.local_block_tables.resize(batch_.block_tables.size());
    batch_.local_slot_mapping.resize(batch_.slot_mapping.size());
  }
  interventions_.resize(max_num_batched_tokens);
  loras_.resize(max_num_batched_tokens);
  logits_.resize(max_logits_rows * model.config().vocab_size);
  if (model.shard().distributed()) {
    ledgers_ = std::make_unique<RankBlockLedgers>(cache.num_blocks(), cache.local_num_blocks());
    handles_.resize(max_num_seqs);
    int rank = -1;
    long long step = -1;
    if (const char* c = std::getenv("KVIK_TEST_CORRUPT_BLOCK"))
      if (std::sscanf(c, "%d:%lld", &rank, &step) == 2 && rank == model.world().rank()) corrupt_step_ = step;
  }
}

FlatBatch::FlatBatch(int64_t max_tokens, int64_t max_seqs, int64_t max_blocks, int64_t max_logits_rows)
    : max_blocks_per_seq(max_blocks),
      token_ids(max_tokens),
      positions(max_tokens),
      query_start_loc(max_seqs + 1),
      seq_lens(max_seqs),
      block_tables(max_seqs * max_blocks),
      logits_indices(max_logits_rows),
      slot_mapping(max_tokens) {}

ForwardBatch FlatBatch::view(int64_t T, int64_t R, int64_t num_logits) const {
  ForwardBatch b;
  b.token_ids = {token_ids.data(), static_cast<size_t>(T)};
  b.positions = {positions.data(), static_cast<size_t>(T)};
  b.slot_mapping = {slot_mapping.data(), static_cast<size_t>(T)};
  b.query_start_loc = {query_start_loc.data(), static_cast<size_t>(R + 1)};
  b.seq_lens = {seq_lens.data(), static_cast<size_t>(R)};
  b.block_tables = {block_tables.data(), static_cast<size_t>(R * max_blocks_per_seq)};
  b.max_blocks_per_seq = static_cast<int32_t>(max_blocks_per_seq);
  b.logits_indices = {logits_indices.data(), static_cast<size_t>(num_logits)};
  if (has_local) {
    b.local_slot_mapping = {local_slot_mapping.data(), static_cast<size_t>(T)};
    b.local_block_tables = {local_block_tables.data(), static_cast<size_t>(R * max_blocks_per_seq)};
  }
  return b;
}

const float* ModelRunner::execute(const SchedulerOutput& out, const KVCacheManager& kv,
                                  std::vector<SampleRows>& sample) {
  sample.clear();
  const int32_t bs = cache_.block_size();
  const int64_t R = static_cast<int64_t>(out.scheduled.size());
  if (out.total_num_scheduled_tokens > static_cast<int64_t>(batch_.token_ids.size()) ||
      R > static_cast<int64_t>(batch_.seq_lens.size()))
    fail("internal: step of {} tokens / {} requests exceeds the runner's buffers", out.total_num_scheduled_tokens, R);
  int64_t t = 0, num_rows = 0;
  bool any_interventions = false;
  bool any_lora = false;
  batch_.query_start_loc[0] = 0;
  if (ledgers_) publish_ledger_edits(kv);
  for (int64_t r = 0; r < R; ++r) {
    Request& req = *out.scheduled[r].request;
    if (ledgers_) handles_[r] = ledgers_->handle(req.request_id);
    const int64_t n = out.scheduled[r].num_scheduled_tokens;
    const int64_t num_spec = static_cast<int64_t>(req.spec_token_ids.size());
    const int64_t end = req.num_computed_tokens + n;  // positions computed after this step
    if (end > req.num_tokens() + num_spec)
      fail("internal: request '{}' scheduled past its last token and drafts", req.request_id);
    const BlockTable& table = kv.block_table(req.request_id);
    if (table.size() > batch_.max_blocks_per_seq)
      fail("internal: request '{}' holds {} blocks, more than max_model_len allows", req.request_id, table.size());
    table.copy_ids(&batch_.block_tables[r * batch_.max_blocks_per_seq]);
    const BlockTable* local = nullptr;  // the local layers' table, when they have a pool of their own
    if (kv.has_local_group()) {
      if (batch_.local_block_tables.empty()) fail("internal: a local KV group, but the KV cache has no local pool");
      local = &kv.local_block_table(req.request_id);
      if (local->size() > batch_.max_blocks_per_seq)
        fail("internal: request '{}' holds {} local blocks, more than max_model_len allows", req.request_id,
             local->size());
      local->copy_ids(&batch_.local_block_tables[r * batch_.max_blocks_per_seq]);
    }
    batch_.has_local = local != nullptr;
    const InterventionList* iv = req.sampling_params.interventions.get();
    any_interventions |= iv != nullptr;
    std::fill_n(interventions_.begin() + t, n, iv);
    const LoraAdapter* lora = req.sampling_params.lora.get();
    any_lora |= lora != nullptr;
    std::fill_n(loras_.begin() + t, n, lora);
    for (int64_t i = 0; i < n; ++i, ++t) {
      const int64_t pos = req.num_computed_tokens + i;
      batch_.token_ids[t] =
          pos < req.num_tokens() ? req.all_token_ids[pos] : req.spec_token_ids[pos - req.num_tokens()];
      batch_.positions[t] = static_cast<int32_t>(pos);
      batch_.slot_mapping[t] = table.slot(pos, bs);
      if (local) batch_.local_slot_mapping[t] = local->slot(pos, bs);
    }
    batch_.query_start_loc[r + 1] = static_cast<int32_t>(t);
    batch_.seq_lens[r] = static_cast<int32_t>(end);
    if (end == req.num_tokens() + num_spec) {  // the last token (and every draft) computed: logits for each
      const int64_t rows = 1 + num_spec;
      if (num_rows + rows > static_cast<int64_t>(batch_.logits_indices.size()))
        fail("internal: step needs more than {} logits rows", batch_.logits_indices.size());
      sample.push_back({&req, num_rows, rows});
      for (int64_t i = 0; i < rows; ++i) batch_.logits_indices[num_rows++] = static_cast<int32_t>(t - rows + i);
    }
  }
  if (model_.shard().distributed()) {
    int64_t T = t, N = num_rows, r = R;
    broadcast_step(1, T, r, N, out.blocks_to_copy);
  }
  // Copy-on-write copies first: this step's writes go into the copies.
  for (const BlockCopy& c : out.blocks_to_copy) cache_.copy_block(c.src, c.dst, c.num_slots, c.local);
  run_forward(t, R, num_rows, any_interventions, any_lora);
  return logits_.data();
}

void ModelRunner::run_forward(int64_t T, int64_t R, int64_t N, bool any_interventions, bool any_lora) {
  ForwardBatch b = batch_.view(T, R, N);
  if (any_interventions) b.interventions = {interventions_.data(), static_cast<size_t>(T)};
  if (any_lora) b.loras = {loras_.data(), static_cast<size_t>(T)};
  model_.forward(b, cache_, logits_.data());
}

bool ModelRunner::broadcast_step(int64_t kind, int64_t& T, int64_t& R, int64_t& N,
                                 const std::vector<BlockCopy>& copies) {
  static_assert(sizeof(LedgerEdit) == 16, "a ledger edit is four int32 on the wire");
  dist::Communicator& world = model_.world();
  const bool root = world.rank() == 0;
  int64_t header[7] = {
      kind, T, R, N, batch_.has_local, static_cast<int64_t>(copies.size()), static_cast<int64_t>(edits_.size())};
  world.broadcast_idle(header, sizeof(header), 0);  // the other ranks wait here between steps
  // The ledger edits come first, with the stop too: every rank's ledger ends where rank 0's pool does.
  if (!root) edits_.resize(static_cast<size_t>(header[6]));
  world.broadcast(edits_.data(), header[6] * static_cast<int64_t>(sizeof(LedgerEdit)), 0);
  if (!root)
    if (auto err = ledgers_->apply(edits_)) world.abort(fmt::format("KV block ledger: step {}: {}", step_, *err));
  if (header[0] == 0) return false;
  T = header[1], R = header[2], N = header[3];
  const int64_t num_copies = header[5];
  if (T > static_cast<int64_t>(batch_.token_ids.size()) || R > static_cast<int64_t>(batch_.seq_lens.size()) ||
      N > static_cast<int64_t>(batch_.logits_indices.size()))
    world.abort(
        fmt::format("a step of {} tokens / {} requests / {} logits rows exceeds this rank's buffers: every "
                    "rank needs the same engine flags",
                    T, R, N));
  batch_.has_local = header[4] != 0;
  const int64_t mb = batch_.max_blocks_per_seq;
  auto send = [&](auto& v, int64_t n) { world.broadcast(v.data(), n * sizeof(v[0]), 0); };
  send(batch_.token_ids, T);
  send(batch_.positions, T);
  send(batch_.slot_mapping, T);
  send(batch_.query_start_loc, R + 1);
  send(batch_.seq_lens, R);
  send(batch_.block_tables, R * mb);
  send(batch_.logits_indices, N);
  if (batch_.has_local) {
    send(batch_.local_slot_mapping, T);
    send(batch_.local_block_tables, R * mb);
  }
  send(handles_, R);
  copies_.resize(std::max<size_t>(copies_.size(), 5 * num_copies));
  if (root)
    for (size_t i = 0; i < copies.size(); ++i)
      std::copy_n(std::array<int32_t, 5>{copies[i].src, copies[i].dst, copies[i].num_slots, copies[i].local,
                                         ledgers_->handle(copies[i].request_id)}
                      .data(),
                  5, &copies_[5 * i]);
  send(copies_, 5 * num_copies);
  if (corrupt_step_ >= 0 && step_ >= corrupt_step_ && T > 0) {
    const int64_t bs = cache_.block_size();
    batch_.slot_mapping[0] = (batch_.slot_mapping[0] + bs) % (cache_.num_blocks() * bs);
    log_warn("rank {}: KVIK_TEST_CORRUPT_BLOCK: step {}: the first token's slot moved to block {}", world.rank(), step_,
             batch_.slot_mapping[0] / bs);
    corrupt_step_ = -1;
  }
  check_ledgers(T, R, N, num_copies);
  ++step_;
  if (!root)
    for (int64_t i = 0; i < num_copies; ++i)
      cache_.copy_block(copies_[5 * i], copies_[5 * i + 1], copies_[5 * i + 2], copies_[5 * i + 3] != 0);
  return true;
}

void ModelRunner::publish_ledger_edits(const KVCacheManager& kv) {
  if (auto err = ledgers_->publish(kv, edits_))
    model_.world().abort(fmt::format("KV block ledger: step {}: {}", step_, *err));
}

void ModelRunner::check_ledgers(int64_t T, int64_t R, int64_t N, int64_t num_copies) {
  const ForwardBatch b = batch_.view(T, R, N);
  const std::span<const int32_t> handles(handles_.data(), static_cast<size_t>(R));
  const std::span<const int32_t> copies(copies_.data(), static_cast<size_t>(5 * num_copies));
  if (auto err = ledgers_->check_step(b, handles, cache_.block_size(), copies))
    model_.world().abort(fmt::format("KV block ledger: step {}: {}", step_, *err));
}

bool ModelRunner::execute_remote() {
  int64_t T = 0, R = 0, N = 0;
  if (!broadcast_step(0, T, R, N, {})) return false;
  run_forward(T, R, N, false, false);
  return true;
}

void ModelRunner::stop_workers(const KVCacheManager& kv) {
  if (!ledgers_ || model_.world().rank() != 0 || stopped_) return;
  publish_ledger_edits(kv);
  int64_t T = 0, R = 0, N = 0;
  broadcast_step(0, T, R, N, {});
  stopped_ = true;
}

ModelRunner::~ModelRunner() {
  if (!ledgers_ || model_.world().rank() != 0 || stopped_) return;
  edits_.clear();  // the KV cache manager may be gone: the other ranks' ledgers stay where the last step left them
  int64_t T = 0, R = 0, N = 0;
  broadcast_step(0, T, R, N, {});
}

}  // namespace kvik
