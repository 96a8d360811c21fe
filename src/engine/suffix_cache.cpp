#include "engine/suffix_cache.h"

#include <algorithm>
#include <cmath>

namespace kvik {

namespace {

// Length of the common suffix of a[0, a_end) and b[0, b_end), at most `limit`.
int32_t match_back(std::span<const int32_t> a, int64_t a_end, std::span<const int32_t> b, int64_t b_end,
                   int32_t limit) {
  int32_t n = 0;
  while (n < limit && n < a_end && n < b_end &&
         a[static_cast<size_t>(a_end - 1 - n)] == b[static_cast<size_t>(b_end - 1 - n)])
    ++n;
  return n;
}

}  // namespace

SuffixCache::SuffixCache(int32_t max_depth, int32_t max_cached_requests, double max_spec_factor)
    : max_depth_(max_depth), max_cached_(max_cached_requests), max_spec_factor_(max_spec_factor) {}

const SuffixCache::Seq* SuffixCache::find(uint64_t id) const {
  if (seqs_.empty() || id < seqs_.front().id) return nullptr;
  return &seqs_[static_cast<size_t>(id - seqs_.front().id)];  // ids are consecutive
}

void SuffixCache::add(std::span<const int32_t> tokens) {
  if (max_cached_ <= 0 || tokens.size() < kKey + 1) return;
  if (static_cast<int32_t>(seqs_.size()) == max_cached_) {
    const Seq& old = seqs_.front();
    for (size_t e = kKey; e <= old.tokens.size(); ++e) {
      auto it = index_.find(key(old.tokens.data() + e - kKey));
      if (it == index_.end()) continue;
      std::erase_if(it->second, [&](const Occurrence& o) { return o.seq == old.id; });
      if (it->second.empty()) index_.erase(it);
    }
    seqs_.pop_front();
  }
  seqs_.push_back({next_id_++, std::vector<int32_t>(tokens.begin(), tokens.end())});
  const Seq& s = seqs_.back();
  for (size_t e = kKey; e < s.tokens.size(); ++e)  // a key at the very end has nothing after it
    index_[key(s.tokens.data() + e - kKey)].push_back({s.id, static_cast<int32_t>(e)});
}

int32_t SuffixCache::propose(std::span<const int32_t> tokens, int32_t k, std::vector<int32_t>& out) const {
  out.clear();
  const auto L = static_cast<int64_t>(tokens.size());
  if (k <= 0 || L < kKey + 1) return 0;
  // The request's own text: the most recent earlier end of its last kKey tokens, extended backwards.
  std::span<const int32_t> best_src;
  int64_t best_end = 0;
  int32_t best_len = 0;
  for (int64_t e = L - 1; e >= kKey; --e) {
    if (tokens[static_cast<size_t>(e - 1)] != tokens[static_cast<size_t>(L - 1)] ||
        tokens[static_cast<size_t>(e - 2)] != tokens[static_cast<size_t>(L - 2)])
      continue;
    const int32_t n = match_back(tokens, e, tokens, L, max_depth_);
    if (n > best_len) best_src = tokens, best_end = e, best_len = n;
    if (n >= max_depth_) break;
  }
  if (best_len < max_depth_) {
    auto it = index_.find(key(tokens.data() + L - kKey));
    if (it != index_.end()) {
      const std::vector<Occurrence>& occ = it->second;
      const size_t first = occ.size() > kMaxCandidates ? occ.size() - kMaxCandidates : 0;
      for (size_t i = occ.size(); i-- > first;) {
        const Seq* s = find(occ[i].seq);
        if (!s) continue;
        const int32_t n = match_back(s->tokens, occ[i].end, tokens, L, max_depth_);
        if (n > best_len) best_src = s->tokens, best_end = occ[i].end, best_len = n;
      }
    }
  }
  if (best_len < kKey) return 0;
  const auto cap = static_cast<int64_t>(std::floor(max_spec_factor_ * best_len));
  const int64_t n = std::min<int64_t>({k, std::max<int64_t>(cap, 1)});
  for (int64_t j = 0; j < n; ++j) {
    const int64_t idx = best_end + j;
    if (best_src.data() == tokens.data()) {  // its own text may run into its own continuation (a loop)
      out.push_back(idx < L ? tokens[static_cast<size_t>(idx)] : out[static_cast<size_t>(idx - L)]);
    } else {
      if (idx >= static_cast<int64_t>(best_src.size())) break;
      out.push_back(best_src[static_cast<size_t>(idx)]);
    }
  }
  return static_cast<int32_t>(out.size());
}

}  // namespace kvik
