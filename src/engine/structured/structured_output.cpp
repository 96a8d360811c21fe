#include "engine/structured/structured_output.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/structured/json_schema_to_gbnf.h"
#include "engine/structured/regex_to_gbnf.h"

namespace kvik::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<GrammarDfa> dfa, std::shared_ptr<const VocabTrie> trie)
    : dfa_(std::move(dfa)), trie_(std::move(trie)), cursor_(dfa_->start()) {}

GrammarMatcher::GrammarMatcher(std::shared_ptr<GrammarDfa> dfa, std::shared_ptr<const VocabTrie> trie,
                               const StructuredOutputSpec& spec)
    : GrammarMatcher(std::move(dfa), std::move(trie)) {
  triggers_ = spec.triggers;
  trigger_tokens_ = spec.trigger_tokens;
  if (triggers_.empty() && trigger_tokens_.empty()) return;
  active_ = false;
  if (!spec.think_close.empty()) {
    think_open_ = spec.think_open;
    think_close_ = spec.think_close;
    think_ = spec.think_always ? Think::kInside : Think::kStart;
  }
  auto all = std::make_shared<TokenMask>();
  const size_t vocab = static_cast<size_t>(trie_->vocab_size());
  all->bits.assign((vocab + 63) / 64, ~uint64_t{0});
  if (vocab % 64) all->bits.back() = (uint64_t{1} << (vocab % 64)) - 1;  // no ids past the vocabulary
  all->accepting = true;
  all->any = true;
  all_ = std::move(all);
}

std::shared_ptr<const TokenMask> GrammarMatcher::mask() { return active_ ? dfa_->mask(cursor_) : all_; }

bool GrammarMatcher::past_thinking() {
  if (think_ == Think::kStart) {
    const size_t first = tail_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return false;
    const std::string_view rest = std::string_view(tail_).substr(first);
    if (rest.size() < think_open_.size() && think_open_.compare(0, rest.size(), rest) == 0) return false;
    if (!think_open_.empty() && rest.substr(0, think_open_.size()) == think_open_) {
      tail_.erase(0, first + think_open_.size());
      think_ = Think::kInside;
    } else {
      think_ = Think::kNone;
    }
  }
  if (think_ == Think::kInside) {
    const size_t close = tail_.find(think_close_);
    if (close == std::string::npos) {
      if (tail_.size() >= think_close_.size()) tail_.erase(0, tail_.size() - think_close_.size() + 1);
      return false;
    }
    tail_.erase(0, close + think_close_.size());
    think_ = Think::kNone;
    at_start_ = true;  // "^" triggers count from the answer's start
  }
  return true;
}

bool GrammarMatcher::watch(int32_t id) {
  std::string bytes = trie_->token_bytes(id);
  if (think_ != Think::kNone) {
    tail_ += bytes;
    if (!past_thinking()) return true;
    bytes = std::move(tail_);  // what follows </think> is looked at as output
    tail_.clear();
  }
  for (const auto& [tid, text] : trigger_tokens_) {
    if (tid != id) continue;
    DfaCursor c = cursor_;
    if (dfa_->advance(c, text)) cursor_ = c, active_ = true;
    return true;
  }
  return watch_bytes(bytes);
}

bool GrammarMatcher::watch_bytes(std::string_view bytes) {
  const size_t old = tail_.size();
  tail_ += bytes;
  size_t best = std::string::npos;
  for (const std::string& t : triggers_) {
    if (!t.empty() && t[0] == '^') {
      if (!at_start_) continue;
      const size_t first = tail_.find_first_not_of(" \t\r\n");
      if (first != std::string::npos && tail_.compare(first, t.size() - 1, t, 1) == 0) best = std::min(best, first);
      continue;
    }
    const size_t from = old >= t.size() ? old - t.size() + 1 : 0;
    const size_t k = tail_.find(t, from);
    if (k != std::string::npos) best = std::min(best, k);
  }
  if (best != std::string::npos) {
    DfaCursor c = cursor_;
    // A trigger the grammar does not take from there (bytes after it in the same token it rejects) leaves the
    // output unconstrained, as without a grammar.
    if (dfa_->advance(c, std::string_view(tail_).substr(best))) cursor_ = c, active_ = true;
    tail_.clear();
    return true;
  }
  if (at_start_) {  // the start holds while the text past leading whitespace may still become a "^" trigger
    const size_t first = tail_.find_first_not_of(" \t\r\n");
    const std::string_view rest = first == std::string::npos ? "" : std::string_view(tail_).substr(first);
    bool prefix = rest.empty();
    for (const std::string& t : triggers_)
      prefix =
          prefix || (!t.empty() && t[0] == '^' && rest.size() < t.size() - 1 && t.compare(1, rest.size(), rest) == 0);
    at_start_ = prefix;
  }
  size_t keep = 0;
  for (const std::string& t : triggers_) keep = std::max(keep, t.size());
  if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (id < 0 || id >= trie_->vocab_size()) return false;
  if (!active_) return watch(id);
  if (trie_->token_bytes(id).empty()) return false;
  return dfa_->advance(cursor_, trie_->token_bytes(id));
}

std::string spec_to_gbnf(const StructuredOutputSpec& spec) {
  using Kind = StructuredOutputSpec::Kind;
  switch (spec.kind) {
    case Kind::kJsonObject: return json_object_gbnf();
    case Kind::kJsonSchema: return json_schema_to_gbnf(spec.text);
    case Kind::kRegex: return "root ::= " + regex_to_gbnf(spec.text) + "\n";
    case Kind::kGrammar: return spec.text;
    case Kind::kChoice: return choice_gbnf(spec.choices);
  }
  fail("structured output: unknown kind");
}

StructuredOutputManager::StructuredOutputManager(std::shared_ptr<const VocabTrie> trie, size_t cache_size)
    : trie_(std::move(trie)), cache_size_(std::max<size_t>(cache_size, 1)) {}

size_t StructuredOutputManager::cache_entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

std::unique_ptr<GrammarMatcher> StructuredOutputManager::make_matcher(const StructuredOutputSpec& spec,
                                                                      std::string& error) {
  std::string key =
      std::to_string(static_cast<int>(spec.kind)) + ":" +
      (spec.kind == StructuredOutputSpec::Kind::kChoice ? nlohmann::json(spec.choices).dump() : spec.text);
  std::shared_ptr<GrammarDfa> dfa;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      dfa = it->second->second;
    }
  }
  try {
    if (!dfa) {
      // Compiled outside the lock: a large schema does not hold up other requests.
      dfa = std::make_shared<GrammarDfa>(parse_gbnf(spec_to_gbnf(spec)), trie_);
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = cache_.find(key); it != cache_.end()) {
        dfa = it->second->second;
      } else {
        lru_.emplace_front(key, dfa);
        cache_.emplace(std::move(key), lru_.begin());
        while (lru_.size() > cache_size_) {
          cache_.erase(lru_.back().first);
          lru_.pop_back();
        }
      }
    }
    return std::make_unique<GrammarMatcher>(dfa, trie_, spec);
  } catch (const Error& e) {
    error = e.what();
    return nullptr;
  }
}

void apply_token_mask(std::span<const float> logits_in, std::span<float> logits_out, const TokenMask& mask,
                      std::span<const int32_t> eos_ids, bool allow_eos) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t V = logits_in.size();
  const size_t covered = std::min(V, mask.bits.size() * 64);
  for (size_t w = 0; w * 64 < covered; ++w) {
    const uint64_t bits = mask.bits[w];
    const size_t end = std::min(covered, w * 64 + 64);
    if (bits == 0) {
      std::fill(logits_out.begin() + static_cast<std::ptrdiff_t>(w * 64),
                logits_out.begin() + static_cast<std::ptrdiff_t>(end), kNegInf);
      continue;
    }
    for (size_t i = w * 64; i < end; ++i) logits_out[i] = (bits >> (i & 63)) & 1 ? logits_in[i] : kNegInf;
  }
  for (size_t i = covered; i < V; ++i) logits_out[i] = kNegInf;
  for (int32_t e : eos_ids)
    if (e >= 0 && static_cast<size_t>(e) < V) logits_out[e] = allow_eos && mask.accepting ? logits_in[e] : kNegInf;
}

}  // namespace kvik::structured
