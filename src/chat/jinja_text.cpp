#include "chat/jinja_text.h"

#include <cctype>
#include <cmath>

namespace kvik::jinja {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  const auto drop = [&](char c) {
    return chars && chars->is_string() ? chars->str().find(c) != std::string::npos : is_ws(c);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string ascii_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string title_case(const std::string& s, bool title) {
  std::string out = title ? s : ascii_lower(s);
  bool start = true;
  for (char& c : out) {
    if (start)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    else if (title)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    start = title ? is_ws(c) : false;
  }
  return out;
}

std::optional<std::string> replace_all(const std::string& s, const std::string& from, const std::string& to,
                                       size_t max_bytes, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    if (out.size() > max_bytes) return std::nullopt;
    pos = at + from.size();
  }
  out.append(s, pos, std::string::npos);
  if (out.size() > max_bytes) return std::nullopt;
  return out;
}

Value split(const std::string& s, const Value* sep, int64_t maxsplit) {
  Array parts;
  if (!sep || sep->is_none() || sep->is_undefined()) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_ws(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        j = s.size();
        while (j > i && is_ws(s[j - 1])) --j;
      } else {
        while (j < s.size() && !is_ws(s[j])) ++j;
      }
      parts.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
    return Value::array(std::move(parts));
  }
  const std::string& d = sep->str();
  size_t pos = 0;
  for (;;) {
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) || d.empty() ? std::string::npos
                                                                                                     : s.find(d, pos);
    if (at == std::string::npos) {
      parts.push_back(Value::string(s.substr(pos)));
      break;
    }
    parts.push_back(Value::string(s.substr(pos, at - pos)));
    pos = at + d.size();
  }
  return Value::array(std::move(parts));
}

int64_t utf8_length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::optional<int64_t> whole(const Value& v) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b ? 1 : 0;
  if (v.kind != Value::Kind::kFloat || v.f != std::floor(v.f) || !(std::fabs(v.f) < 9.2e18)) return std::nullopt;
  return static_cast<int64_t>(v.f);
}

std::optional<int64_t> int_op(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? std::nullopt : std::optional(r);
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? std::nullopt : std::optional(r);
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? std::nullopt : std::optional(r);
  if (op == "//" || op == "%") {  // floor division and its remainder (sign of the divisor)
    if (y == -1) return op == "%" ? std::optional<int64_t>(0) : int_op("-", 0, x);
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
    return op == "//" ? q : m;
  }
  if (op == "**") {  // y >= 0
    int64_t base = x;
    r = 1;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return std::nullopt;
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return std::nullopt;
    }
    return r;
  }
  return std::nullopt;
}

}  // namespace kvik::jinja
