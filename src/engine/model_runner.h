// Builds one flat batch per step from the scheduler's decision (vLLM's GPUModelRunner, on the CPU):
// token ids, positions, slot_mapping, query_start_loc, seq_lens and block tables for every scheduled
// request, and logits only for the requests whose last scheduled token is their last token.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace kvik {

class ModelRunner {
 public:
  ModelRunner(LlamaModel& model, KvCacheTensors& cache, int64_t max_num_batched_tokens, int64_t max_num_seqs,
              int64_t max_model_len);

  // Runs the step (first the scheduler's copy-on-write block copies). `sample_reqs` receives the requests
  // that produce a token this step (in batch order) and the returned pointer their logits,
  // [sample_reqs.size(), V], valid until the next call.
  const float* execute(const SchedulerOutput& out, const KVCacheManager& kv, std::vector<Request*>& sample_reqs);

 private:
  LlamaModel& model_;
  KvCacheTensors& cache_;
  int64_t max_blocks_per_seq_;
  // Persistent buffers, sized at start-up: no allocation inside a step.
  std::vector<int32_t> token_ids_, positions_, query_start_loc_, seq_lens_, block_tables_, logits_indices_;
  std::vector<int64_t> slot_mapping_;
  std::vector<const InterventionList*> interventions_;  // per token; passed on only when a request has any
  std::vector<float> logits_;
};

}  // namespace kvik
