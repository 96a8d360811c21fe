// The grammar recognizer: llama.cpp's pushdown automaton (a state is a set of stacks of grammar positions,
// each stack's top a byte set; a byte advances every stack whose top matches) determinized lazily. Each
// distinct stack set is interned once as a DFA state with a 256-entry transition row filled on first use,
// so after warm-up a byte costs one table lookup — the mask walk over the vocabulary trie runs at DFA
// speed, and a regular grammar (a regex, a schema without recursion) becomes a plain DFA over bytes.
//
// Masks are cached per DFA state. The table is bounded: past kMaxStates it is cleared and a new generation
// begins; a matcher keeps its stack set, so it re-interns its state and carries on.
//
// One GrammarDfa is shared by every request using the same compiled grammar; a mutex serializes them.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/vocab_trie.h"

namespace kvik::structured {

// Allowed tokens of one state: a bitset over the trie's vocabulary (EOS is the caller's: see `accepting`).
struct TokenMask {
  std::vector<uint64_t> bits;
  bool accepting = false;  // the text so far is a complete sentence of the grammar
  bool any = false;        // at least one bit set
  bool allowed(int32_t id) const { return (bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
};

// Where one request stands; owned by its GrammarMatcher, read and written only through GrammarDfa.
struct DfaCursor {
  std::vector<uint32_t> key;  // the canonical stack set (survives a table reset)
  uint64_t generation = 0;
  int32_t state = -1;
};

class GrammarDfa {
 public:
  static constexpr size_t kMaxStates = 8192;
  static constexpr size_t kMaxMaskBytes = size_t{8} << 20;  // per grammar

  GrammarDfa(Grammar grammar, std::shared_ptr<const VocabTrie> trie);

  DfaCursor start();
  // Feeds bytes; false (cursor unchanged) when the grammar rejects them.
  bool advance(DfaCursor& c, std::string_view bytes);
  bool accepting(DfaCursor& c);
  // The tokens that may follow; cached per state. Throws kvik::Error on a pathological grammar.
  std::shared_ptr<const TokenMask> mask(DfaCursor& c);

  const Grammar& grammar() const { return grammar_; }
  size_t num_states() const;

 private:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kDead = -1;

  int32_t resolve(DfaCursor& c);              // (re-)interns the cursor's state; lock held
  int32_t intern(std::vector<uint32_t> key);  // lock held
  int32_t next(int32_t s, uint8_t b) {
    const int32_t t = trans_[static_cast<size_t>(s) * 256 + b];
    return t != kUnknown ? t : compute(s, b);
  }
  int32_t compute(int32_t s, uint8_t b);
  void reset();

  Grammar grammar_;
  std::shared_ptr<const VocabTrie> trie_;
  mutable std::mutex mu_;
  uint64_t generation_ = 1;
  std::vector<std::vector<uint32_t>> keys_;  // state → stack-set key
  std::vector<char> accepting_;
  std::vector<int32_t> trans_;                    // state × 256
  std::unordered_map<std::string, int32_t> ids_;  // key bytes → state
  std::unordered_map<int32_t, std::shared_ptr<const TokenMask>> masks_;
  std::vector<int32_t> walk_;  // trie walk: state per depth
};

}  // namespace kvik::structured
