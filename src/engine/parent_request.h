// A request as the user added it (vLLM's ParentRequest): its id, its n sequences and which of them have
// sent their final output. With n > 1 the prompt is prefilled once as a Request with the parent's id; the
// step that completes it samples the last logits row once per sequence and forks into sequences
// "<id>-<i>" (sequence i draws from RequestRng(seed + i), so it equals a request seeded seed + i) that
// share the prompt's KV blocks. EngineCore keeps one registry of these, by every id a user may name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/structured/structured_output.h"

namespace kvik {

// The engine id of sequence i of a request added as `id` with n sequences: `id` itself when n == 1.
inline std::string sequence_id(const std::string& id, int32_t index, int32_t n) {
  return n == 1 ? id : id + "-" + std::to_string(index);
}

struct ParentRequest {
  std::string request_id;
  int32_t n = 1;
  uint64_t seed = 0;           // sequence i samples from RequestRng(seed + i)
  std::vector<bool> finished;  // per sequence: its final output has been produced
  // Until the fork, one grammar matcher per sequence (structured output); each moves into its sequence.
  std::vector<std::unique_ptr<structured::GrammarMatcher>> grammars;

  ParentRequest(std::string id, int32_t num_seqs, uint64_t seed_)
      : request_id(std::move(id)), n(num_seqs), seed(seed_), finished(static_cast<size_t>(num_seqs), false) {}

  std::string sequence_id(int32_t i) const { return kvik::sequence_id(request_id, i, n); }
  // Every id this request answers to: its own and, with n > 1, each sequence's.
  std::vector<std::string> ids() const {
    std::vector<std::string> out = {request_id};
    if (n > 1)
      for (int32_t i = 0; i < n; ++i) out.push_back(sequence_id(i));
    return out;
  }
  // The sequence index an id names, -1 for the parent's own id when n > 1 (all sequences).
  int32_t index_of(const std::string& id) const {
    for (int32_t i = 0; i < n; ++i)
      if (sequence_id(i) == id) return i;
    return -1;
  }
  int32_t num_unfinished() const {
    int32_t k = 0;
    for (bool f : finished) k += !f;
    return k;
  }
  // Marks sequence i finished; true when it was not already (its final output is to be sent now).
  bool finish(int32_t i) {
    if (finished[static_cast<size_t>(i)]) return false;
    finished[static_cast<size_t>(i)] = true;
    return true;
  }
};

}  // namespace kvik
