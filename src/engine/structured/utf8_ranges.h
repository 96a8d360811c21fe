// Code point sets and their UTF-8 form: a set of code points becomes a few sequences of byte ranges
// (the construction of RE2 and Rust's regex-syntax `Utf8Sequences`), so automata can run on bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace kvik::structured {

// `digits` hexadecimal digits of s from pos (escape parsing in GBNF and regexes). pos moves past each digit read,
// so on failure it points at the first character that is not one; nullopt then.
inline std::optional<uint32_t> read_hex(std::string_view s, size_t& pos, int digits) {
  uint32_t v = 0;
  for (int i = 0; i < digits; ++i, ++pos) {
    const char c = pos < s.size() ? s[pos] : '\0';
    int d = -1;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  return v;
}

// Sorted, disjoint, non-adjacent inclusive ranges of code points.
class CodepointSet {
 public:
  void add(uint32_t lo, uint32_t hi);
  void add(const CodepointSet& other);
  // Everything in [0, U+10FFFF] not in this set (surrogates are never matched either way).
  CodepointSet complement() const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }
  bool empty() const { return ranges_.empty(); }
  bool operator<(const CodepointSet& o) const { return ranges_ < o.ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// The UTF-8 encodings of exactly the scalar values in `set` (surrogates D800–DFFF left out), as byte-range
// sequences: a byte string of length k is an encoding of a member iff it matches one sequence of length k.
std::vector<ByteRangeSeq> utf8_sequences(const CodepointSet& set);

// Decodes one UTF-8 scalar value at the start of `s`; returns its length, or 0 when invalid (overlong,
// surrogate, truncated, above U+10FFFF).
size_t decode_utf8(std::string_view s, uint32_t& cp);
// Writes the UTF-8 encoding of `cp` (a scalar value) to `out`; returns its length (1..4).
size_t encode_utf8(uint32_t cp, char* out);

}  // namespace kvik::structured
