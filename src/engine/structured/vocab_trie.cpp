#include "engine/structured/vocab_trie.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kvik::structured {

VocabTrie::VocabTrie(std::vector<std::string> token_bytes) : token_bytes_(std::move(token_bytes)) {
  std::vector<int32_t> order;
  for (int32_t i = 0; i < vocab_size(); ++i)
    if (!token_bytes_[i].empty()) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[a] != token_bytes_[b] ? token_bytes_[a] < token_bytes_[b] : a < b;
  });
  // Sorted strings: each new string shares a prefix with the previous one; nodes past that prefix close
  // (their subtree ends here) and new nodes open for the rest.
  std::vector<uint32_t> open;  // node index at each depth − 1 on the current path
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = token_bytes_[id];
    if (s.size() > 0xFFFF) fail("structured output: token {} has {} bytes, more than 65535", id, s.size());
    size_t lcp = 0;
    if (prev) {
      const size_t n = std::min(prev->size(), s.size());
      while (lcp < n && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    while (open.size() > lcp) {
      nodes_[open.back()].skip = static_cast<uint32_t>(nodes_.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      open.push_back(static_cast<uint32_t>(nodes_.size()));
      const auto t = static_cast<uint32_t>(token_ids_.size());
      nodes_.push_back({0, t, t, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(s[d])});
    }
    // Tokens with equal bytes are adjacent in `order`, so a node's tokens are one contiguous run.
    Node& last = nodes_[open.back()];
    if (last.tok_end != token_ids_.size()) last.tok_begin = last.tok_end = static_cast<uint32_t>(token_ids_.size());
    token_ids_.push_back(id);
    last.tok_end = static_cast<uint32_t>(token_ids_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    prev = &s;
  }
  for (uint32_t n : open) nodes_[n].skip = static_cast<uint32_t>(nodes_.size());
}

std::vector<std::string> VocabTrie::token_bytes_of(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t i = 0; i < tokenizer.vocab_size(); ++i)
    if (!tokenizer.is_special(i)) bytes[i] = tokenizer.token_to_piece(i);
  return bytes;
}

}  // namespace kvik::structured
