// String and number helpers of the Jinja renderer (Python's semantics where templates rely on them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace kvik::jinja {

bool is_ws(char c);
// s without the leading (left) and trailing (right) characters in `chars` (a string Value), or whitespace
// when `chars` is null or not a string.
std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
// Python's str.title() (title) or str.capitalize() on ASCII letters.
std::string title_case(const std::string& s, bool title);
// Python's str.replace (count < 0: every occurrence); nullopt when the result would pass max_bytes.
std::optional<std::string> replace_all(const std::string& s, const std::string& from, const std::string& to,
                                       size_t max_bytes, int64_t count = -1);
// Python's str.split: no separator (null, none or undefined) splits on whitespace runs and drops empty pieces.
Value split(const std::string& s, const Value* sep, int64_t maxsplit);
// Python's len() on a UTF-8 string: code points.
int64_t utf8_length(const std::string& s);
// A number as an integer index, count or width: floats must be whole and inside int64 (no UB casts).
std::optional<int64_t> whole(const Value& v);
// Python's integer arithmetic (+ - * // % **) within int64; nullopt on overflow (Python would grow a big integer).
std::optional<int64_t> int_op(const std::string& op, int64_t x, int64_t y);

}  // namespace kvik::jinja
