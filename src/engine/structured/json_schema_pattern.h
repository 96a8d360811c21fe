// JSON Schema's `pattern` (an ECMA-262 regex that must match somewhere in the string: a branch without `^` may
// have any text before it, one without `$` any text after) as the GBNF of a JSON string's content, intersected with
// minLength / maxLength where the pattern's shape allows it exactly.
//
// The intersection rule: a branch (top-level alternative) is a sequence of elements, each an atom with a quantifier.
// When at most one element has a variable length and its atom has a fixed width w, the lengths L = F + w·k (F the
// fixed part) that lie in [minLength, maxLength] are a range of k: that element's quantifier becomes the range.
// A branch whose length range already lies inside the bounds is kept as it is, one outside them is dropped.
// Otherwise the lengths are not enforced beside that pattern (PatternGrammar::lengths_enforced is false).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kvik::structured {

class GrammarDfa;

struct PatternGrammar {
  std::string expr;              // content of the JSON string; "" when no string satisfies pattern and lengths
  bool lengths_enforced = true;  // false: only the pattern is enforced
};

// max_length < 0: no maximum. Throws kvik::Error (from the regex translator) for a pattern it cannot express.
PatternGrammar pattern_gbnf(std::string_view pattern, int64_t min_length, int64_t max_length);

// A pattern compiled once for testing strings against it (search semantics); it matches nothing when the pattern
// cannot be compiled.
class PatternMatcher {
 public:
  explicit PatternMatcher(std::string_view pattern);
  PatternMatcher(PatternMatcher&&) noexcept;
  PatternMatcher& operator=(PatternMatcher&&) noexcept;
  ~PatternMatcher();
  bool matches(std::string_view text);

 private:
  std::unique_ptr<GrammarDfa> dfa_;
};

}  // namespace kvik::structured
