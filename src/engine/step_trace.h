// One forward step as a table of shapes (docs/concepts.md's notation): ids [T], x [T, d], q/k/v per head, the cache
// [n_kv, ctx, d_h], scores [n_h, T, ctx], the MLP [T, d_ff], logits [V] and the slot mapping, with this model's
// numbers and the residual stream's RMS after each layer from a real run of the step (SingleSequence). Used by
// `kvik trace` and the server's trace endpoint (run on the engine thread, which owns the model's workspace).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/llama.h"

namespace kvik {

struct StepTraceRow {
  std::string code;           // the step as pseudocode, "q = h @ W_q[l] -> heads"
  std::string shape;          // in symbols, "[n_h, T, d_h]"
  std::vector<int64_t> dims;  // the same with this step's numbers (empty for a row without a tensor)
  std::string note;
  bool per_layer = false;  // inside `for l in range(L)`
};

struct StepTrace {
  bool decode = false;                // the prompt's last token on a cache of the rest, else the whole prompt
  int64_t T = 0, ctx = 0;             // new tokens; cache length after the step
  std::vector<int32_t> token_ids;     // this step's ids [T]
  std::vector<int64_t> slot_mapping;  // cache slot of each new token's K/V (contiguous blocks: slot = position)
  std::vector<double> stream_rms;     // RMS of the last position's stream after the embedding, then each layer
  std::vector<StepTraceRow> rows;
  int32_t next_token = 0;  // the greedy next token and its probability
  float next_prob = 0;
};

// Runs the step and returns its table. `ids` must fit the model's context (and hold 2 tokens for a decode).
StepTrace trace_step(LlamaModel& model, const std::vector<int32_t>& ids, bool decode);

}  // namespace kvik
