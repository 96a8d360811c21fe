// Suffix decoding's proposer (vLLM's "suffix" speculative method, after Arctic Inference's SuffixDecoding): drafts
// come from the longest match of a request's latest tokens in its own prompt + output and in the prompts + outputs
// of recent requests, so an agent loop that repeats what earlier requests said speculates from their text. An index
// maps every two-token window of the cached sequences to where it ends; a lookup takes the request's last two
// tokens, extends each candidate's match backwards up to max_depth tokens, and copies what followed the longest
// match (the most recent among equals; the request's own text first), at most max_spec_factor × the match length.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvik {

class SuffixCache {
 public:
  SuffixCache(int32_t max_depth, int32_t max_cached_requests, double max_spec_factor);

  // Adds a finished request's tokens (prompt + output); beyond max_cached_requests the oldest leaves.
  void add(std::span<const int32_t> tokens);
  // Up to k proposals for a request whose prompt + output so far is `tokens`, written into `out` (cleared first).
  // Returns out.size(): 0 when not even the last two tokens occur earlier.
  int32_t propose(std::span<const int32_t> tokens, int32_t k, std::vector<int32_t>& out) const;
  int64_t num_cached() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  static constexpr int kKey = 2;             // tokens in an index key (the shortest match that proposes)
  static constexpr int kMaxCandidates = 64;  // occurrences of a key examined, most recent first
  struct Seq {
    uint64_t id;
    std::vector<int32_t> tokens;
  };
  struct Occurrence {
    uint64_t seq;
    int32_t end;  // the index just past the key's last token
  };
  static uint64_t key(const int32_t* p) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(p[0])) << 32) | static_cast<uint32_t>(p[1]);
  }
  const Seq* find(uint64_t id) const;

  int32_t max_depth_, max_cached_;
  double max_spec_factor_;
  uint64_t next_id_ = 0;
  std::deque<Seq> seqs_;  // oldest first; ids ascending
  std::unordered_map<uint64_t, std::vector<Occurrence>> index_;
};

}  // namespace kvik
