#include "engine/structured/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "engine/structured/utf8_ranges.h"

namespace kvik::structured {

uint32_t read_repetition_count(std::string_view text, size_t& pos, std::string& error) {
  const size_t start = pos;
  uint64_t v = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    v = v * 10 + static_cast<uint64_t>(text[pos] - '0');
    if (v > kMaxRepetition) {
      error = fmt::format("repetition count above the limit of {}", kMaxRepetition);
      return 0;
    }
    ++pos;
  }
  if (pos == start) error = "expected a number";
  return static_cast<uint32_t>(v);
}

std::vector<uint32_t> Grammar::alternatives(uint32_t rule) const {
  std::vector<uint32_t> starts;
  uint32_t pos = rule_start[rule];
  starts.push_back(pos);
  while (elems[pos].type != ElemType::kEnd) {
    if (elems[pos].type == ElemType::kAlt) starts.push_back(pos + 1);
    ++pos;
  }
  return starts;
}

namespace {

using Seq = std::vector<Elem>;
using Alts = std::vector<Seq>;

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : src_(text) {}

  Grammar parse() {
    if (src_.size() > kMaxGrammarTextBytes)
      fail("grammar: the text has {} bytes, more than the limit of {}", src_.size(), kMaxGrammarTextBytes);
    pos_ = 0;
    space(true);
    while (pos_ < src_.size()) rule();
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) fail("grammar: rule '{}' is used but not defined", names_[r]);
    auto it = ids_.find("root");
    if (it == ids_.end()) fail("grammar: no 'root' rule (the start symbol)");
    return finish(it->second);
  }

 private:
  // ---- errors and characters ----
  [[noreturn]] void error(std::string_view what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail("grammar: line {} column {}: {}", line, col, what);
  }
  bool at_end() const { return pos_ >= src_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) error("expected a rule name");
    return std::string(src_.substr(start, pos_ - start));
  }

  uint32_t hex(int digits) {
    const std::optional<uint32_t> v = read_hex(src_, pos_, digits);
    if (!v) error(fmt::format("expected {} hex digits in an escape", digits));
    return *v;
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t code_point() {
    if (at_end()) error("unexpected end of the grammar");
    if (peek() == '\\') {
      ++pos_;
      const char c = peek();
      ++pos_;
      switch (c) {
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': {
          const uint32_t v = hex(8);
          if (v > 0x10FFFF) error("code point above U+10FFFF");
          return v;
        }
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case 'f': return '\f';
        case 'v': return '\v';
        case '0': return 0;
        default:
          if (static_cast<unsigned char>(c) < 0x80 && c != 0 && !is_name_char(c)) return static_cast<unsigned char>(c);
          --pos_;
          error(fmt::format("unknown escape '\\{}'", c));
      }
    }
    uint32_t cp;
    const size_t n = decode_utf8(src_.substr(pos_), cp);
    if (n == 0) error("invalid UTF-8 in the grammar text");
    pos_ += n;
    return cp;
  }

  // ---- rules ----
  uint32_t rule_id(const std::string& n) {
    auto [it, inserted] = ids_.emplace(n, static_cast<uint32_t>(rules_.size()));
    if (inserted) {
      rules_.emplace_back();
      names_.push_back(n);
      defined_.push_back(false);
    }
    return it->second;
  }
  uint32_t new_rule(const std::string& base) {
    std::string n;
    do n = fmt::format("{}_{}", base, ++generated_);
    while (ids_.count(n));
    const uint32_t id = rule_id(n);
    defined_[id] = true;
    return id;
  }
  void count(size_t n) {
    num_elems_ += n;
    if (num_elems_ > kMaxGrammarElems)
      error(fmt::format("the grammar expands to more than {} elements", kMaxGrammarElems));
  }

  uint32_t byteset(const std::bitset<256>& b) {
    auto [it, inserted] = byteset_ids_.emplace(b, static_cast<uint32_t>(bytesets_.size()));
    if (inserted) bytesets_.push_back(b);
    return it->second;
  }

  // A code point set as one element: a byte set when every member is one byte, else a rule whose
  // alternatives are the UTF-8 byte sequences (deduplicated by set, so "[^\"]" twice is one rule).
  Elem class_elem(const CodepointSet& set) {
    const auto seqs = utf8_sequences(set);
    if (seqs.empty()) error("the character class matches nothing");
    std::bitset<256> single;
    bool all_single = true;
    for (const auto& s : seqs) {
      if (s.size() != 1) {
        all_single = false;
        break;
      }
      for (uint32_t b = s[0].first; b <= s[0].second; ++b) single.set(b);
    }
    if (all_single) return {ElemType::kBytes, byteset(single)};
    auto it = class_rules_.find(set);
    if (it != class_rules_.end()) return {ElemType::kRuleRef, it->second};
    const uint32_t r = new_rule("class");
    Alts alts;
    Seq ascii;
    std::bitset<256> one;
    for (const auto& s : seqs) {
      if (s.size() == 1) {
        for (uint32_t b = s[0].first; b <= s[0].second; ++b) one.set(b);
        continue;
      }
      Seq q;
      for (const auto& [lo, hi] : s) {
        std::bitset<256> b;
        for (uint32_t x = lo; x <= hi; ++x) b.set(x);
        q.push_back({ElemType::kBytes, byteset(b)});
      }
      alts.push_back(std::move(q));
    }
    if (one.any()) alts.insert(alts.begin(), Seq{{ElemType::kBytes, byteset(one)}});
    for (const auto& a : alts) count(a.size() + 1);
    rules_[r] = std::move(alts);
    class_rules_.emplace(set, r);
    return {ElemType::kRuleRef, r};
  }

  void rule() {
    const std::string n = name();
    space(false);
    if (src_.substr(pos_, 3) != "::=") error(fmt::format("expected '::=' after the rule name '{}'", n));
    pos_ += 3;
    space(true);
    const uint32_t id = rule_id(n);
    if (defined_[id]) error(fmt::format("rule '{}' is defined twice", n));
    defined_[id] = true;
    Alts alts = alternates(n, false);
    rules_[id] = std::move(alts);
    if (!at_end()) {
      if (peek() == '\r') ++pos_;
      if (peek() != '\n') error("expected a newline or the end after a rule");
      ++pos_;
    }
    space(true);
  }

  Alts alternates(const std::string& rule_name, bool nested) {
    Alts alts;
    alts.push_back(sequence(rule_name, nested));
    while (peek() == '|') {
      ++pos_;
      space(true);
      alts.push_back(sequence(rule_name, nested));
    }
    return alts;
  }

  Seq sequence(const std::string& rule_name, bool nested) {
    Seq seq;
    size_t last_start = 0;  // where the last symbol begins (for postfix operators)
    bool have_last = false;
    while (!at_end()) {
      const char c = peek();
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) error(fmt::format("'{}' has nothing before it to repeat", c));
        repetition(seq, last_start, rule_name, nested);
      } else if (c == '"' || c == '[' || c == '.' || c == '(' || is_name_char(c)) {
        last_start = seq.size();
        symbol(seq, rule_name);
        // An empty literal "" is the empty sequence; a postfix operator on it applies to nothing.
        have_last = seq.size() > last_start;
      } else {
        break;
      }
      space(nested);
    }
    count(seq.size() + 1);
    return seq;
  }

  // One symbol at pos_: a "literal" (one element per byte), a [class], '.', a (group) or a rule reference.
  void symbol(Seq& seq, const std::string& rule_name) {
    const char c = peek();
    if (c == '"') return literal(seq);
    if (c == '[') return seq.push_back(char_class());
    if (c == '(') return seq.push_back(group(rule_name));
    if (c == '.') {
      ++pos_;
      CodepointSet any;
      any.add(0, 0x10FFFF);
      return seq.push_back(class_elem(any));
    }
    const std::string ref = name();
    seq.push_back({ElemType::kRuleRef, rule_id(ref)});
  }

  void literal(Seq& seq) {
    ++pos_;
    while (peek() != '"') {
      if (at_end() || peek() == '\n') error("unterminated string literal");
      char buf[4];
      const size_t n = encode_utf8(code_point(), buf);
      for (size_t i = 0; i < n; ++i) {
        std::bitset<256> b;
        b.set(static_cast<unsigned char>(buf[i]));
        seq.push_back({ElemType::kBytes, byteset(b)});
      }
    }
    ++pos_;
  }

  Elem char_class() {
    ++pos_;
    CodepointSet set;
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    while (peek() != ']') {
      if (at_end() || peek() == '\n') error("unterminated character class");
      const uint32_t lo = code_point();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
        ++pos_;
        if (peek() == '\n') error("unterminated character class");
        hi = code_point();
        if (hi < lo) error("character range is reversed");
      }
      set.add(lo, hi);
    }
    ++pos_;
    return class_elem(negated ? set.complement() : set);
  }

  // ( alternatives ): a new rule, referenced here.
  Elem group(const std::string& rule_name) {
    ++pos_;
    space(true);
    const uint32_t r = new_rule(rule_name);
    Alts alts = alternates(rule_name, true);
    for (const auto& a : alts) count(a.size() + 1);
    rules_[r] = std::move(alts);
    if (peek() != ')') error("expected ')'");
    ++pos_;
    return {ElemType::kRuleRef, r};
  }

  // A postfix * + ? or {m,n} applied to the symbol at seq[last_start..].
  void repetition(Seq& seq, size_t last_start, const std::string& rule_name, bool nested) {
    const char c = peek();
    uint32_t min_times = 0, max_times = UINT32_MAX;  // UINT32_MAX = unbounded
    ++pos_;
    if (c == '+')
      min_times = 1;
    else if (c == '?')
      max_times = 1;
    else if (c == '{') {
      space(nested);
      min_times = number();
      space(nested);
      if (peek() == ',') {
        ++pos_;
        space(nested);
        if (peek() != '}') max_times = number();
      } else {
        max_times = min_times;
      }
      space(nested);
      if (peek() != '}') error("expected '}' to close a repetition");
      ++pos_;
      if (max_times < min_times) error("repetition {m,n} with n < m");
    }
    repeat(seq, last_start, min_times, max_times, rule_name);
  }

  uint32_t number() {
    std::string err;
    const uint32_t v = read_repetition_count(src_, pos_, err);
    if (!err.empty()) error(err);
    return v;
  }

  // Replaces seq[last_start..] (the last symbol) by its repetition, llama.cpp's rewriting:
  //   x*  → R ::= x R | ε          x{m,n} → x … x (m times) then n−m nested optionals (x (x)?)?
  // Every generated reference sits at the end of its alternative, so the recognizer's stack does not grow.
  void repeat(Seq& seq, size_t last_start, uint32_t min_times, uint32_t max_times, const std::string& rule_name) {
    const Seq item(seq.begin() + static_cast<std::ptrdiff_t>(last_start), seq.end());
    seq.resize(last_start);
    count(item.size() * std::max<uint32_t>(min_times, 1) + 4);
    for (uint32_t i = 0; i < min_times; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (max_times == UINT32_MAX) {
      const uint32_t r = new_rule(rule_name);
      Seq loop = item;
      loop.push_back({ElemType::kRuleRef, r});
      count(loop.size() + 2);
      rules_[r] = Alts{loop, Seq{}};
      seq.push_back({ElemType::kRuleRef, r});
      return;
    }
    // opt_k ::= x opt_{k-1} | ε, built innermost first.
    int64_t next = -1;
    for (uint32_t k = 0; k < max_times - min_times; ++k) {
      const uint32_t r = new_rule(rule_name);
      Seq s = item;
      if (next >= 0) s.push_back({ElemType::kRuleRef, static_cast<uint32_t>(next)});
      count(s.size() + 2);
      rules_[r] = Alts{s, Seq{}};
      next = r;
    }
    if (next >= 0) seq.push_back({ElemType::kRuleRef, static_cast<uint32_t>(next)});
  }

  // ---- checks and layout ----
  void check_left_recursion() const {
    const size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : rules_[r]) {
          bool all = true;
          for (const auto& e : alt)
            if (e.type == ElemType::kBytes || !nullable[e.value]) {
              all = false;
              break;
            }
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // Edge A → B when B can be the first thing A expands to; a cycle is left recursion.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (const auto& alt : rules_[r])
        for (const auto& e : alt) {
          if (e.type == ElemType::kBytes) break;
          first[r].push_back(e.value);
          if (!nullable[e.value]) break;
        }
    std::vector<char> color(n, 0);  // 0 new, 1 on the path, 2 done
    for (size_t s = 0; s < n; ++s) {
      if (color[s]) continue;
      std::vector<std::pair<uint32_t, size_t>> stack{{static_cast<uint32_t>(s), 0}};
      color[s] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i < first[r].size()) {
          const uint32_t t = first[r][i++];
          if (color[t] == 1)
            fail("grammar: rule '{}' is left-recursive (it can reach itself without consuming input)", names_[t]);
          if (color[t] == 0) {
            color[t] = 1;
            stack.emplace_back(t, 0);
          }
        } else {
          color[r] = 2;
          stack.pop_back();
        }
      }
    }
  }

  Grammar finish(uint32_t root) {
    check_left_recursion();
    Grammar g;
    g.root = root;
    g.rule_names = names_;
    g.bytesets = bytesets_;
    g.rule_start.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      g.rule_start[r] = static_cast<uint32_t>(g.elems.size());
      for (size_t a = 0; a < rules_[r].size(); ++a) {
        g.elems.insert(g.elems.end(), rules_[r][a].begin(), rules_[r][a].end());
        g.elems.push_back({a + 1 < rules_[r].size() ? ElemType::kAlt : ElemType::kEnd, 0});
      }
    }
    return g;
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::vector<Alts> rules_;
  std::vector<std::string> names_;
  std::vector<char> defined_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::bitset<256>> bytesets_;
  std::unordered_map<std::bitset<256>, uint32_t> byteset_ids_;
  std::map<CodepointSet, uint32_t> class_rules_;
  uint32_t generated_ = 0;
  size_t num_elems_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02X}", c);
    else
      out += static_cast<char>(c);
  }
  return out + "\"";
}

}  // namespace kvik::structured
