// Builds one flat batch per step from the scheduler's decision (vLLM's GPUModelRunner, on the CPU):
// token ids, positions, slot_mapping, query_start_loc, seq_lens and block tables for every scheduled
// request, and logits only for the requests whose last scheduled token is their last token — one row, or
// with k drafts (speculative decoding) k + 1 rows: the last token's and each draft's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv_block_ledger.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace kvik {

// A request that produces tokens this step: its logits rows are first_row .. first_row + num_rows − 1
// (num_rows = 1 + its drafts).
struct SampleRows {
  Request* request = nullptr;
  int64_t first_row = 0;
  int64_t num_rows = 1;
};

// The persistent arrays of one flat batch (token ids, positions, cache slots, per-request query offsets, lengths
// and block tables, logits rows), sized at start-up so a step allocates nothing; view() is the ForwardBatch over
// the first T tokens, R requests and N logits rows. ModelRunner and the draft model's DraftRunner fill one each.
struct FlatBatch {
  FlatBatch(int64_t max_tokens, int64_t max_seqs, int64_t max_blocks_per_seq, int64_t max_logits_rows);
  ForwardBatch view(int64_t T, int64_t R, int64_t num_logits) const;

  int64_t max_blocks_per_seq;
  std::vector<int32_t> token_ids, positions, query_start_loc, seq_lens, block_tables, logits_indices;
  std::vector<int64_t> slot_mapping;
  // The local layers' own tables and slots (KVCacheManager with a local group); view() passes them when has_local.
  bool has_local = false;
  std::vector<int32_t> local_block_tables;
  std::vector<int64_t> local_slot_mapping;
};

class ModelRunner {
 public:
  // max_logits_rows: the most logits rows one step returns (max_num_seqs × (1 + num_speculative_tokens)).
  ModelRunner(LlamaModel& model, KvCacheTensors& cache, int64_t max_num_batched_tokens, int64_t max_num_seqs,
              int64_t max_model_len, int64_t max_logits_rows);

  // Runs the step (first the scheduler's copy-on-write block copies). `sample` receives the requests that
  // produce tokens this step (in batch order) with their rows of the returned logits [rows, V], valid until
  // the next call. A scheduled token past a request's num_tokens() is its draft spec_token_ids[i].
  const float* execute(const SchedulerOutput& out, const KVCacheManager& kv, std::vector<SampleRows>& sample);

  // Tensor / pipeline parallelism: execute() on world rank 0 first broadcasts the step (the flat batch and the
  // block copies); every other rank receives it here and runs its part of the forward pass. False: rank 0 stopped.
  bool execute_remote();
  // Rank 0 of a parallel job: tells the other ranks to stop, with the last ledger edits (every block the requests
  // still hold). The destructor does it without them when this was not called.
  void stop_workers(const KVCacheManager& kv);
  ~ModelRunner();
  // This rank's block ledgers (a parallel job only, else null).
  const RankBlockLedgers* ledgers() const { return ledgers_.get(); }
  int64_t num_steps_broadcast() const { return step_; }
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

 private:
  // The step's sizes, ledger edits and arrays, from rank 0 to every rank (rank 0's kind 0: stop; returns false
  // then); the other ranks receive T, R, N and apply the edits; every rank checks the step against its ledgers, and
  // the other ranks then apply the block copies.
  bool broadcast_step(int64_t kind, int64_t& T, int64_t& R, int64_t& N, const std::vector<BlockCopy>& copies);
  // Rank 0: the ledger edits since the last step (ends the job when its ledger and its pool disagree).
  void publish_ledger_edits(const KVCacheManager& kv);
  void check_ledgers(int64_t T, int64_t R, int64_t N, int64_t num_copies);
  void run_forward(int64_t T, int64_t R, int64_t N, bool any_interventions, bool any_lora);

  LlamaModel& model_;
  KvCacheTensors& cache_;
  // Persistent buffers, sized at start-up: no allocation inside a step.
  FlatBatch batch_;
  std::vector<const InterventionList*> interventions_;  // per token; passed on only when a request has any
  std::vector<const LoraAdapter*> loras_;               // per token; passed on only when a request has one
  std::vector<float> logits_;
  std::vector<int32_t> copies_;  // [num_copies, 5]: src, dst, num_slots, local, request handle
  // Block accounting on every rank (kv_block_ledger.h): a parallel job only.
  std::unique_ptr<RankBlockLedgers> ledgers_;
  std::vector<LedgerEdit> edits_;
  std::vector<int32_t> handles_;  // [R]: each scheduled request's handle
  int64_t step_ = 0;
  bool stopped_ = false;
  // Test hook (KVIK_TEST_CORRUPT_BLOCK=RANK:STEP): that rank moves the first slot of that step (or the next with
  // tokens) to another block after receiving it, so its ledger check must end the job.
  int64_t corrupt_step_ = -1;
};

}  // namespace kvik
