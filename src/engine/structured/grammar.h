// A context-free grammar over bytes, parsed from GBNF (llama.cpp's grammar format), in llama.cpp's flat
// layout: every rule is a run of elements, its alternatives separated by kAlt and closed by kEnd. Character
// classes work on Unicode code points in the text, but are lowered here to alternatives of UTF-8 byte
// sequences (each byte a 256-bit set), so the recognizer (grammar_dfa.h) only ever sees bytes and a token
// may end in the middle of a multi-byte character.
//
// GBNF accepted: `name ::= alternatives` rules (names [a-zA-Z0-9_-]+, `root` is the start), alternatives
// with `|`, sequences, "literals" with escapes (\n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH),
// [classes] with ranges and ^ negation, `.` (any character), ( groups ), postfix ? * + {m} {m,} {m,n},
// `#` comments. As in llama.cpp a rule ends at a newline unless the newline is inside parentheses.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvik::structured {

enum class ElemType : uint8_t {
  kEnd,      // end of a rule (after its last alternative)
  kAlt,      // end of one alternative
  kRuleRef,  // value = rule id
  kBytes,    // value = index into Grammar::bytesets; matches one byte
};

struct Elem {
  ElemType type;
  uint32_t value;
};

struct Grammar {
  std::vector<Elem> elems;
  std::vector<uint32_t> rule_start;  // rule id → index of its first element
  std::vector<std::string> rule_names;
  std::vector<std::bitset<256>> bytesets;
  uint32_t root = 0;

  bool is_end_of_sequence(uint32_t pos) const {
    return elems[pos].type == ElemType::kEnd || elems[pos].type == ElemType::kAlt;
  }
  // Start positions of each alternative of `rule` (an empty alternative starts on its kAlt/kEnd).
  std::vector<uint32_t> alternatives(uint32_t rule) const;
};

// Parses GBNF text. Throws kvik::Error naming the line and column and what was expected, an undefined rule,
// a missing `root`, or left recursion (which would make the recognizer loop).
Grammar parse_gbnf(std::string_view text);

// Limits that keep untrusted grammars small.
inline constexpr size_t kMaxGrammarTextBytes = 1 << 20;
inline constexpr size_t kMaxGrammarElems = 1 << 21;
inline constexpr uint32_t kMaxRepetition = 10000;  // largest m or n in {m,n}

// The count m or n of a {m,n} repetition (GBNF and regex alike): the decimal digits at text[pos..], pos
// advanced past them. On no digit or a count above kMaxRepetition, `error` says so (pos at the offending
// character) and the result is 0.
uint32_t read_repetition_count(std::string_view text, size_t& pos, std::string& error);

// A GBNF string literal for arbitrary bytes ("..." with \" \\ and control bytes escaped; UTF-8 kept as is).
std::string gbnf_literal(std::string_view bytes);

}  // namespace kvik::structured
