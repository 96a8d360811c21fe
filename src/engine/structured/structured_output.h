// Structured output for the engine: compiles a request's StructuredOutputSpec (once per distinct spec,
// cached) into a GrammarDfa over the vocabulary trie, and gives each request a GrammarMatcher that says
// which tokens may come next and follows the tokens sampled.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "engine/structured/grammar_dfa.h"
#include "engine/structured/structured_output_spec.h"
#include "engine/structured/vocab_trie.h"

namespace kvik::structured {

// One request's position in its grammar. A lazy matcher (spec triggers) allows every token, control tokens
// included, until a trigger shows in the output; from then on the grammar holds, fed from the trigger's start.
class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<GrammarDfa> dfa, std::shared_ptr<const VocabTrie> trie);
  // Lazy when the spec has triggers (StructuredOutputSpec: triggers, trigger_tokens, think_*).
  GrammarMatcher(std::shared_ptr<GrammarDfa> dfa, std::shared_ptr<const VocabTrie> trie,
                 const StructuredOutputSpec& spec);

  // Tokens allowed next (EOS excluded: allowed exactly when mask->accepting). Throws kvik::Error only for
  // a pathological grammar (too ambiguous or too deeply nested at this point).
  std::shared_ptr<const TokenMask> mask();
  // Advances over token `id`'s bytes; false (state unchanged) when the grammar rejects them.
  bool accept_token(int32_t id);
  bool accepting() { return !active_ || dfa_->accepting(cursor_); }
  bool active() const { return active_; }  // the grammar holds (always, unless lazy and not triggered yet)

 private:
  bool watch(int32_t id);                    // lazy: looks for a trigger in the output; true when the token was taken
  bool past_thinking();                      // lazy: moves the thinking state on over tail_; true once triggers count
  bool watch_bytes(std::string_view bytes);  // lazy: the trigger search over the output's next bytes

  std::shared_ptr<GrammarDfa> dfa_;
  std::shared_ptr<const VocabTrie> trie_;
  DfaCursor cursor_;
  bool active_ = true;
  std::vector<std::string> triggers_;
  std::vector<std::pair<int32_t, std::string>> trigger_tokens_;
  std::string tail_;      // lazy: the output's last bytes, enough to hold a trigger split across tokens
  bool at_start_ = true;  // lazy: only whitespace so far, or the start of a "^" trigger
  enum class Think { kNone, kStart, kInside } think_ = Think::kNone;  // lazy: a reasoning model's thinking
  std::string think_open_, think_close_;
  std::shared_ptr<const TokenMask> all_;  // lazy: every token allowed
};

// The GBNF text a spec compiles through. Throws kvik::Error naming the problem.
std::string spec_to_gbnf(const StructuredOutputSpec& spec);

class StructuredOutputManager {
 public:
  static constexpr size_t kDefaultCacheSize = 32;

  explicit StructuredOutputManager(std::shared_ptr<const VocabTrie> trie, size_t cache_size = kDefaultCacheSize);

  // A matcher at the start of the spec's grammar, or nullptr with `error` set ("json_schema: at /x: ...").
  // Thread-safe; compiled grammars are cached by (kind, text), least recently used evicted first.
  std::unique_ptr<GrammarMatcher> make_matcher(const StructuredOutputSpec& spec, std::string& error);

  const VocabTrie& trie() const { return *trie_; }
  size_t cache_entries() const;

 private:
  std::shared_ptr<const VocabTrie> trie_;
  size_t cache_size_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<GrammarDfa>>> lru_;  // front = most recent
  std::unordered_map<std::string, decltype(lru_)::iterator> cache_;
};

// logits_out[i] = logits_in[i] where the mask allows i, −∞ elsewhere; EOS ids keep their logit when
// `allow_eos`. Ids past the trie's vocabulary (padding rows) are never allowed.
void apply_token_mask(std::span<const float> logits_in, std::span<float> logits_out, const TokenMask& mask,
                      std::span<const int32_t> eos_ids, bool allow_eos);

}  // namespace kvik::structured
