#include "engine/structured/regex_to_gbnf.h"

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/utf8_ranges.h"

namespace kvik::structured {

namespace {

class RegexTranslator {
 public:
  RegexTranslator(std::string_view p, bool json_string) : p_(p), json_(json_string) {}

  std::string translate() {
    if (p_.size() > kMaxGrammarTextBytes / 8) fail("regex: the pattern has {} bytes, too long", p_.size());
    std::string out = alternation(0);
    if (pos_ < p_.size()) error("unbalanced ')'");
    return out;
  }

 private:
  [[noreturn]] void error(std::string_view what) const {
    fail("regex: {} at offset {} of pattern '{}'", what, pos_, p_);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < p_.size() ? p_[pos_ + k] : '\0'; }

  std::string alternation(int depth) {
    std::string out = "(" + concatenation(depth);
    while (peek() == '|') {
      ++pos_;
      out += " | " + concatenation(depth);
    }
    return out + ")";
  }

  std::string concatenation(int depth) {
    std::string out;
    if (depth == 0 && peek() == '^') ++pos_;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++pos_;
        if (depth == 0 && (at_end() || peek() == '|')) break;
        error("'$' is only supported at the end of the pattern");
      }
      if (peek() == '^') error("'^' is only supported at the start of the pattern");
      std::string atom_text = atom(depth);
      out += " " + quantified(std::move(atom_text));
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantified(std::string a) {
    for (;;) {
      const char c = peek();
      std::string q;
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        q = c;
      } else if (c == '{' && peek(1) >= '0' && peek(1) <= '9') {
        ++pos_;
        const uint32_t m = number();
        uint32_t n = m;
        bool unbounded = false;
        if (peek() == ',') {
          ++pos_;
          if (peek() == '}')
            unbounded = true;
          else
            n = number();
        }
        if (peek() != '}') error("expected '}' in a {m,n} quantifier");
        ++pos_;
        if (!unbounded && n < m) error("{m,n} with n < m");
        q = unbounded ? fmt::format("{{{},}}", m) : fmt::format("{{{},{}}}", m, n);
      } else {
        return a;
      }
      if (peek() == '?') ++pos_;  // lazy: the set of matches is the same
      if (peek() == '+') error("possessive quantifiers are not supported");
      a = "(" + a + ")" + q;
    }
  }

  uint32_t number() {
    std::string err;
    const uint32_t v = read_repetition_count(p_, pos_, err);
    if (!err.empty()) error(err);
    return v;
  }

  std::string atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (peek() == '?') {
        if (peek(1) == ':')
          pos_ += 2;
        else
          error("lookaround and named groups are not supported");
      }
      std::string inner = alternation(depth + 1);
      if (peek() != ')') error("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return set_text(bracket());
    if (c == '.') {
      ++pos_;
      CodepointSet s;  // JavaScript's `.`: not a line terminator
      s.add('\n', '\n');
      s.add('\r', '\r');
      s.add(0x2028, 0x2029);
      return set_text(s.complement());
    }
    if (c == '*' || c == '+' || c == '?') error(fmt::format("'{}' has nothing to repeat", c));
    if (c == '\\') {
      CodepointSet s;
      if (escape(s, false)) return set_text(s);
      return literal(s.ranges()[0].first);
    }
    uint32_t cp;
    const size_t n = decode_utf8(p_.substr(pos_), cp);
    if (n == 0) error("invalid UTF-8");
    pos_ += n;
    return literal(cp);
  }

  // Parses an escape at pos_ into `s`; true when it is a class (\d ...), false for one code point.
  bool escape(CodepointSet& s, bool in_class) {
    ++pos_;  // backslash
    if (at_end()) error("pattern ends with '\\'");
    const char c = p_[pos_++];
    auto one = [&](uint32_t cp) {
      s.add(cp, cp);
      return false;
    };
    switch (c) {
      case 'd': s.add('0', '9'); return true;
      case 'D': {
        CodepointSet d;
        d.add('0', '9');
        s.add(d.complement());
        return true;
      }
      case 'w':
        s.add('a', 'z');
        s.add('A', 'Z');
        s.add('0', '9');
        s.add('_', '_');
        return true;
      case 'W': {
        CodepointSet w;
        w.add('a', 'z');
        w.add('A', 'Z');
        w.add('0', '9');
        w.add('_', '_');
        s.add(w.complement());
        return true;
      }
      case 's': s.add(js_space()); return true;
      case 'S': s.add(js_space().complement()); return true;
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'x': return one(hex(2));
      case 'u': return one(hex(4));
      case 'b':
        if (in_class) return one('\b');
        --pos_;
        error("word boundaries (\\b) are not supported");
      default:
        if (c >= '1' && c <= '9') {
          --pos_;
          error("backreferences are not supported");
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          --pos_;
          error(fmt::format("unknown escape '\\{}'", c));
        }
        {
          --pos_;
          uint32_t cp;
          const size_t n = decode_utf8(p_.substr(pos_), cp);
          if (n == 0) error("invalid UTF-8");
          pos_ += n;
          return one(cp);
        }
    }
  }

  // JavaScript's \s (ajv and browsers validate with it, so \S must leave all of these out).
  static CodepointSet js_space() {
    CodepointSet w;
    w.add('\t', '\r');
    w.add(' ', ' ');
    w.add(0xA0, 0xA0);
    w.add(0x1680, 0x1680);
    w.add(0x2000, 0x200A);
    w.add(0x2028, 0x2029);
    w.add(0x202F, 0x202F);
    w.add(0x205F, 0x205F);
    w.add(0x3000, 0x3000);
    w.add(0xFEFF, 0xFEFF);
    return w;
  }

  uint32_t hex(int digits) {
    const std::optional<uint32_t> v = read_hex(p_, pos_, digits);
    if (!v) error(fmt::format("expected {} hex digits", digits));
    return *v;
  }

  CodepointSet bracket() {
    ++pos_;  // [
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    CodepointSet s;
    while (at_end() || peek() != ']') {  // JavaScript's rule: a leading ']' closes the (empty) class
      if (at_end()) error("unterminated character class");
      uint32_t lo;
      if (peek() == '\\') {
        CodepointSet e;
        if (escape(e, true)) {
          s.add(e);
          continue;
        }
        lo = e.ranges()[0].first;
      } else {
        const size_t n = decode_utf8(p_.substr(pos_), lo);
        if (n == 0) error("invalid UTF-8");
        pos_ += n;
      }
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < p_.size()) {
        ++pos_;
        if (peek() == '\\') {
          CodepointSet e;
          if (escape(e, true)) error("a class escape cannot end a range");
          hi = e.ranges()[0].first;
        } else {
          const size_t n = decode_utf8(p_.substr(pos_), hi);
          if (n == 0) error("invalid UTF-8");
          pos_ += n;
        }
        if (hi < lo) error("character range is reversed");
      }
      s.add(lo, hi);
    }
    ++pos_;  // ]
    return negated ? s.complement() : s;
  }

  // JSON's escape of a code point that cannot appear raw inside a string literal.
  static std::string json_escape(uint32_t cp) {
    switch (cp) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\t': return "\\t";
      case '\r': return "\\r";
      case '\b': return "\\b";
      case '\f': return "\\f";
      default: return fmt::format("\\u{:04x}", cp);
    }
  }
  static bool needs_json_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

  std::string literal(uint32_t cp) const {
    if (json_ && needs_json_escape(cp)) return gbnf_literal(json_escape(cp));
    char buf[4];
    return gbnf_literal(std::string_view(buf, encode_utf8(cp, buf)));
  }

  static std::string class_text(const CodepointSet& s) {
    std::string out = "[";
    for (const auto& [lo, hi] : s.ranges()) {
      out += fmt::format("\\U{:08X}", lo);
      if (hi != lo) out += fmt::format("-\\U{:08X}", hi);
    }
    return out + "]";
  }

  std::string set_text(const CodepointSet& s) const {
    if (!json_) {
      if (s.empty()) error("the character class matches nothing");
      return class_text(s);
    }
    // Raw members stay a class; `"`, `\` and control characters become their escapes.
    CodepointSet unsafe;
    unsafe.add(0, 0x1F);
    unsafe.add('"', '"');
    unsafe.add('\\', '\\');
    CodepointSet raw;
    std::vector<std::string> alts;
    for (const auto& [lo, hi] : s.ranges()) {
      for (uint32_t c = lo; c <= hi && c <= 0x5C; ++c)
        if (needs_json_escape(c)) alts.push_back(gbnf_literal(json_escape(c)));
    }
    const CodepointSet safe = unsafe.complement();
    for (const auto& [lo, hi] : s.ranges())
      for (const auto& [slo, shi] : safe.ranges()) raw.add(std::max(lo, slo), std::min(hi, shi));
    if (!raw.empty()) alts.insert(alts.begin(), class_text(raw));
    if (alts.empty()) error("the character class matches nothing");
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
};

}  // namespace

std::string regex_to_gbnf(std::string_view pattern, bool json_string) {
  return RegexTranslator(pattern, json_string).translate();
}

}  // namespace kvik::structured
