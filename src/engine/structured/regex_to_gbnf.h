// A practical regular-expression subset, translated to a GBNF expression (then compiled like any grammar;
// with no recursion the lazy determinization in grammar_dfa.h makes it a DFA over bytes).
//
// Supported: concatenation, `|`, ( ) and (?: ) groups, ? * + {m} {m,} {m,n} (a trailing lazy `?` is
// accepted and ignored), [classes] with ranges and ^ negation, `.` (anything but \n), \d \D \w \W \s \S,
// \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation. Matching is anchored at both ends: a leading `^`
// and a trailing `$` are accepted and change nothing. Unsupported constructs (backreferences, lookaround,
// \b, anchors in the middle) are errors that name the construct and its offset.
#pragma once

#include <string>
#include <string_view>

namespace kvik::structured {

// json_string: the expression describes the *raw text inside a JSON string literal* whose decoded value
// matches the pattern: `"`, `\` and control characters are produced as their JSON escapes.
// Throws kvik::Error on an unsupported or malformed pattern.
std::string regex_to_gbnf(std::string_view pattern, bool json_string = false);

}  // namespace kvik::structured
