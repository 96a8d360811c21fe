// draft_model speculation's proposer (vLLM's draft-model proposer, on the CPU). The draft model's KV lives in the
// target's paged pool: a second KvCacheTensors with the same number of blocks, so a request's block table
// addresses both caches and the pool's budget (plan_kv_capacity) counts both models' bytes per token. Each step
// one batched catch-up pass feeds every proposing request the tokens its draft has not seen (its whole prompt the
// first time) and yields its first proposal; then k − 1 batched one-token passes extend the proposals. Proposals
// are greedy (argmax of the draft's logits): one-hot, as Sampler::verify_draft requires.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace kvik {

class DraftRunner {
 public:
  DraftRunner(LlamaModel& draft, KvCacheTensors& cache, int64_t max_num_batched_tokens, int64_t max_num_seqs,
              int64_t max_model_len);

  struct Job {
    Request* request = nullptr;
    int32_t k = 0;  // proposals wanted
  };
  // Writes job.k proposals into each job's request->spec_token_ids. The request's blocks must already cover
  // positions up to num_tokens() + k − 2 (the draft's own KV for its proposals but the last). Request::draft_fed
  // (the tokens whose draft KV the request holds, in position order) is rolled back to what still matches the
  // request's tokens first, and extended with what is fed.
  void propose(const std::vector<Job>& jobs, const KVCacheManager& kv);

 private:
  // One forward pass over `rows` (request index, first position, number of tokens, wants logits); the tokens
  // come from the request's tokens and its proposals so far.
  struct Row {
    size_t job;
    int64_t start, len;
    bool logits;
  };
  void run(const std::vector<Job>& jobs, const std::vector<Row>& rows, const KVCacheManager& kv);
  int32_t token_at(const Request& r, int64_t pos) const;

  LlamaModel& model_;
  KvCacheTensors& cache_;
  int64_t max_tokens_;
  FlatBatch batch_;
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;  // per row with logits, in row order
};

}  // namespace kvik
