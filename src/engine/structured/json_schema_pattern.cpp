#include "engine/structured/json_schema_pattern.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/grammar_dfa.h"
#include "engine/structured/regex_to_gbnf.h"
#include "engine/structured/vocab_trie.h"

namespace kvik::structured {

namespace {

constexpr int64_t kInf = -1;

// One element of a branch: an atom and its quantifier; widths in characters (kInf: unbounded; unknown: the atom's
// width could not be worked out, e.g. a backreference).
struct Element {
  std::string atom;
  int64_t qmin = 1, qmax = 1;
  int64_t wmin = 1, wmax = 1;
  bool known = true;
};

int64_t mul(int64_t a, int64_t b) { return a == kInf || b == kInf ? (a == 0 || b == 0 ? 0 : kInf) : a * b; }
int64_t add(int64_t a, int64_t b) { return a == kInf || b == kInf ? kInf : a + b; }

// End of the bracket class opened at p[i] == '['.
size_t class_end(std::string_view p, size_t i) {
  size_t j = i + 1;
  if (j < p.size() && p[j] == '^') ++j;
  if (j < p.size() && p[j] == ']') ++j;
  for (; j < p.size(); ++j) {
    if (p[j] == '\\')
      ++j;
    else if (p[j] == ']')
      return j + 1;
  }
  return p.size();
}

// End of the group opened at p[i] == '('.
size_t group_end(std::string_view p, size_t i) {
  int depth = 0;
  for (size_t j = i; j < p.size();) {
    if (p[j] == '\\') {
      j += 2;
    } else if (p[j] == '[') {
      j = class_end(p, j);
    } else {
      if (p[j] == '(') ++depth;
      if (p[j] == ')' && --depth == 0) return j + 1;
      ++j;
    }
  }
  return p.size();
}

// End of the escape at p[i] == '\\', and whether it matches one character.
size_t escape_end(std::string_view p, size_t i, bool& one_char) {
  one_char = true;
  if (i + 1 >= p.size()) return p.size();
  const char c = p[i + 1];
  if (c == 'b' || c == 'B' || (c >= '1' && c <= '9') || c == 'k') one_char = false;
  if ((c == 'u' || c == 'p' || c == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
    const size_t close = p.find('}', i + 2);
    return close == std::string_view::npos ? p.size() : close + 1;
  }
  if (c == 'u') return std::min(p.size(), i + 6);
  if (c == 'x') return std::min(p.size(), i + 4);
  if (c == 'c') return std::min(p.size(), i + 3);
  return i + 2;
}

std::vector<std::string_view> split_branches(std::string_view p) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t j = 0; j < p.size();) {
    if (p[j] == '\\') {
      j += 2;
    } else if (p[j] == '[') {
      j = class_end(p, j);
    } else if (p[j] == '(') {
      j = group_end(p, j);
    } else if (p[j] == '|') {
      out.push_back(p.substr(start, j - start));
      start = ++j;
    } else {
      ++j;
    }
  }
  out.push_back(p.substr(start));
  return out;
}

// Groups nested deeper than this are not measured (the analysis recurses once per level).
constexpr int kMaxGroupDepth = 32;

void width_of(std::string_view p, int64_t& wmin, int64_t& wmax, bool& known, int depth);

// Parses the elements of a branch without top-level alternatives; `known` false on a construct it cannot measure.
std::vector<Element> elements(std::string_view b, bool& known, int depth) {
  std::vector<Element> out;
  for (size_t i = 0; i < b.size();) {
    Element e;
    size_t end;
    if (b[i] == '(') {
      end = group_end(b, i);
      std::string_view inner = b.substr(i + 1, end >= i + 2 ? end - i - 2 : 0);
      if (inner.substr(0, 2) == "?:")
        inner.remove_prefix(2);
      else if (!inner.empty() && inner[0] == '?')
        e.known = false;  // lookaround, named group
      if (depth >= kMaxGroupDepth) e.known = false;
      if (e.known) width_of(inner, e.wmin, e.wmax, e.known, depth + 1);
    } else if (b[i] == '[') {
      end = class_end(b, i);
    } else if (b[i] == '\\') {
      bool one = true;
      end = escape_end(b, i, one);
      e.known = one;
    } else if (b[i] == '^' || b[i] == '$') {
      end = i + 1;
      e.wmin = e.wmax = 0;
      e.known = false;
    } else {
      end = i + 1;  // one character: a whole UTF-8 sequence
      while (end < b.size() && (static_cast<unsigned char>(b[end]) & 0xC0) == 0x80) ++end;
    }
    e.atom = std::string(b.substr(i, end - i));
    i = end;
    // Quantifier (a lazy '?' after it changes nothing).
    if (i < b.size() && (b[i] == '*' || b[i] == '+' || b[i] == '?')) {
      e.qmin = b[i] == '+' ? 1 : 0;
      e.qmax = b[i] == '?' ? 1 : kInf;
      ++i;
    } else if (i + 1 < b.size() && b[i] == '{' && b[i + 1] >= '0' && b[i + 1] <= '9') {
      const size_t close = b.find('}', i);
      const std::string q(b.substr(i + 1, close == std::string_view::npos ? 0 : close - i - 1));
      const size_t comma = q.find(',');
      try {
        e.qmin = std::stoll(q.substr(0, comma));
        e.qmax = comma == std::string::npos ? e.qmin : (comma + 1 == q.size() ? kInf : std::stoll(q.substr(comma + 1)));
      } catch (const std::exception&) {
        known = false;
      }
      i = close == std::string_view::npos ? b.size() : close + 1;
    }
    if (i < b.size() && b[i] == '?' && (e.qmin != 1 || e.qmax != 1)) ++i;
    known = known && e.known;
    out.push_back(std::move(e));
  }
  return out;
}

void width_of(std::string_view p, int64_t& wmin, int64_t& wmax, bool& known, int depth) {
  wmin = std::numeric_limits<int64_t>::max();
  wmax = 0;
  for (std::string_view branch : split_branches(p)) {
    int64_t bmin = 0, bmax = 0;
    for (const Element& e : elements(branch, known, depth)) {
      bmin = add(bmin, mul(e.wmin, e.qmin));
      bmax = add(bmax, mul(e.wmax, e.qmax));
    }
    wmin = std::min(wmin, bmin);
    wmax = wmax == kInf || bmax == kInf ? kInf : std::max(wmax, bmax);
  }
}

std::string quantifier_text(int64_t qmin, int64_t qmax) {
  if (qmin == 1 && qmax == 1) return "";
  if (qmax == kInf) return fmt::format("{{{},}}", qmin);
  return fmt::format("{{{},{}}}", qmin, qmax);
}

// The branch intersected with the lengths: its text, "" to drop it, nullopt when the lengths cannot be enforced.
std::optional<std::string> intersect_branch(std::vector<Element> els, int64_t lo, int64_t hi) {
  int64_t tmin = 0, tmax = 0, fixed = 0;
  int variable = -1, num_variable = 0;
  for (size_t i = 0; i < els.size(); ++i) {
    const Element& e = els[i];
    tmin = add(tmin, mul(e.wmin, e.qmin));
    tmax = add(tmax, mul(e.wmax, e.qmax));
    if (e.wmin == e.wmax && e.qmin == e.qmax) {
      fixed += e.wmin * e.qmin;
    } else if (e.wmin != 0 || e.wmax != 0) {
      ++num_variable;
      variable = static_cast<int>(i);
    }
  }
  auto text = [&] {
    std::string t;
    for (const Element& e : els)
      t += (e.qmin == 1 && e.qmax == 1 ? e.atom : "(?:" + e.atom + ")") + quantifier_text(e.qmin, e.qmax);
    return t;
  };
  if (tmin >= lo && (hi == kInf || (tmax != kInf && tmax <= hi))) return text();
  if ((tmax != kInf && tmax < lo) || (hi != kInf && tmin > hi)) return "";
  if (num_variable != 1) return std::nullopt;
  Element& v = els[static_cast<size_t>(variable)];
  if (v.wmin != v.wmax || v.wmin <= 0) return std::nullopt;
  const int64_t w = v.wmin;
  int64_t kmin = std::max<int64_t>(v.qmin, lo <= fixed ? 0 : (lo - fixed + w - 1) / w);
  int64_t kmax = hi == kInf ? v.qmax : (hi < fixed ? -2 : (hi - fixed) / w);
  if (v.qmax != kInf && kmax != kInf) kmax = std::min(kmax, v.qmax);
  if (kmax != kInf && kmax < kmin) return "";
  if (kmin > kMaxRepetition || (kmax != kInf && kmax > kMaxRepetition)) return std::nullopt;
  v.qmin = kmin;
  v.qmax = kmax;
  return text();
}

}  // namespace

PatternGrammar pattern_gbnf(std::string_view pattern, int64_t min_length, int64_t max_length) {
  PatternGrammar g;
  const bool lengths = min_length > 0 || max_length >= 0;
  std::string regex;
  size_t kept = 0;
  for (std::string_view branch : split_branches(pattern)) {
    const bool start = !branch.empty() && branch[0] == '^';
    if (start) branch.remove_prefix(1);
    size_t slashes = 0;
    while (branch.size() >= 2 + slashes && branch[branch.size() - 2 - slashes] == '\\') ++slashes;
    const bool end = !branch.empty() && branch.back() == '$' && slashes % 2 == 0;
    if (end) branch.remove_suffix(1);
    bool known = true;
    std::vector<Element> els = elements(branch, known, 0);
    Element any{"[\\s\\S]", 0, kInf, 1, 1, true};
    if (!start) els.insert(els.begin(), any);
    if (!end) els.push_back(any);
    std::optional<std::string> text;
    if (lengths && known) text = intersect_branch(els, min_length, max_length < 0 ? kInf : max_length);
    if (!text) {
      if (lengths) g.lengths_enforced = false;
      text = intersect_branch(els, 0, kInf);
    }
    if (text->empty()) continue;
    regex += (kept++ ? "|" : "") + *text;
  }
  if (kept == 0) return g;  // no string satisfies both
  g.expr = regex_to_gbnf(regex, /*json_string=*/true);
  return g;
}

PatternMatcher::PatternMatcher(std::string_view pattern) {
  static const std::shared_ptr<const VocabTrie> kBytes = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const VocabTrie>(std::move(v));
  }();
  try {
    const PatternGrammar g = pattern_gbnf(pattern, 0, -1);
    if (!g.expr.empty()) dfa_ = std::make_unique<GrammarDfa>(parse_gbnf("root ::= " + g.expr + "\n"), kBytes);
  } catch (const Error&) {
    dfa_.reset();
  }
}

PatternMatcher::PatternMatcher(PatternMatcher&&) noexcept = default;
PatternMatcher& PatternMatcher::operator=(PatternMatcher&&) noexcept = default;
PatternMatcher::~PatternMatcher() = default;

bool PatternMatcher::matches(std::string_view text) {
  if (!dfa_) return false;
  try {
    const std::string quoted = nlohmann::json(std::string(text)).dump();
    DfaCursor c = dfa_->start();
    return dfa_->advance(c, std::string_view(quoted).substr(1, quoted.size() - 2)) && dfa_->accepting(c);
  } catch (const Error&) {
    return false;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace kvik::structured
