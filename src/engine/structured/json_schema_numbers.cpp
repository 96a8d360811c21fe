#include "engine/structured/json_schema_numbers.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace kvik::structured {

namespace {

// ---- non-negative integers as canonical digit strings ----

int compare_mag(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

std::string add_one(std::string a) {
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != '9') {
      ++a[i];
      return a;
    }
    a[i] = '0';
  }
  return "1" + a;
}

std::string sub_one(std::string a) {  // a > 0
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != '0') {
      --a[i];
      break;
    }
    a[i] = '9';
  }
  const size_t nz = a.find_first_not_of('0');
  return nz == std::string::npos ? "0" : a.substr(nz);
}

// A signed integer bound.
struct Int {
  bool negative = false;
  std::string mag = "0";
};

int compare_int(const Int& a, const Int& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = compare_mag(a.mag, b.mag);
  return a.negative ? -c : c;
}

Int plus_one(const Int& a) {
  if (!a.negative) return {false, add_one(a.mag)};
  const std::string m = sub_one(a.mag);
  return {m != "0", m};
}

Int minus_one(const Int& a) {
  if (a.negative) return {true, add_one(a.mag)};
  if (a.mag == "0") return {true, "1"};
  return {false, sub_one(a.mag)};
}

Int floor_of(const Decimal& d) {
  const Int i{d.negative && d.int_digits != "0", d.int_digits};
  if (d.frac_digits.empty() || !d.negative) return d.int_digits == "0" ? Int{} : i;
  return {true, add_one(d.int_digits)};  // -3.5 → -4
}

Int ceil_of(const Decimal& d) {
  if (d.frac_digits.empty()) return {d.negative && d.int_digits != "0", d.int_digits};
  if (d.negative) return {d.int_digits != "0", d.int_digits};  // -3.5 → -3
  return {false, add_one(d.int_digits)};
}

// ---- GBNF pieces ----

std::string digit_class(char lo, char hi) {
  return lo == hi ? fmt::format("\"{}\"", lo) : fmt::format("[{}-{}]", lo, hi);
}

std::string group(const std::string& x) { return "(" + x + ")"; }

std::string any_digits(size_t n) { return n == 1 ? "[0-9]" : fmt::format("[0-9]{{{}}}", n); }

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "(" : " | ") + a;
  return out + ")";
}

// Digit strings of from.size() digits (leading zeros allowed) with values in [from, to]; from <= to.
std::string digits_range(const std::string& from, const std::string& to) {
  size_t i = 0;
  while (i < from.size() && from[i] == to[i]) ++i;
  std::string prefix = i > 0 ? fmt::format("\"{}\"", from.substr(0, i)) : "";
  if (i == from.size()) return prefix;
  const size_t n = from.size() - i - 1;
  const char f = from[i], t = to[i];
  std::vector<std::string> alts;
  if (n == 0) {
    alts.push_back(digit_class(f, t));
  } else {
    const std::string from_rest = from.substr(i + 1), to_rest = to.substr(i + 1);
    const bool from_zeros = from_rest.find_first_not_of('0') == std::string::npos;
    const bool to_nines = to_rest.find_first_not_of('9') == std::string::npos;
    const char lo = from_zeros ? f : static_cast<char>(f + 1), hi = to_nines ? t : static_cast<char>(t - 1);
    if (!from_zeros) alts.push_back(fmt::format("\"{}\" {}", f, digits_range(from_rest, std::string(n, '9'))));
    if (lo <= hi) alts.push_back(digit_class(lo, hi) + " " + any_digits(n));
    if (!to_nines) alts.push_back(fmt::format("\"{}\" {}", t, digits_range(std::string(n, '0'), to_rest)));
  }
  const std::string rest = alternatives(alts);
  return prefix.empty() ? rest : prefix + " " + rest;
}

// Canonical non-negative integers in [lo, hi] (hi nullopt: up to max(open_digits, |lo|) digits); "" when empty.
std::string uint_range(const std::string& lo, const std::optional<std::string>& hi, size_t open_digits) {
  if (hi && compare_mag(lo, *hi) > 0) return "";
  const size_t la = lo.size(), lb = hi ? hi->size() : std::max(open_digits, la);
  std::vector<std::string> alts;
  alts.push_back(digits_range(lo, hi && lb == la ? *hi : std::string(la, '9')));
  const size_t full_end = hi ? lb - 1 : lb;  // lengths la+1 .. full_end take every number of that length
  if (la + 1 <= full_end)
    alts.push_back(la + 1 == full_end ? "[1-9] " + any_digits(la)
                                      : fmt::format("[1-9] [0-9]{{{},{}}}", la, full_end - 1));
  if (hi && lb > la) {
    std::string first(lb, '0');  // 10…0
    first[0] = '1';
    alts.push_back(digits_range(first, *hi));
  }
  return alternatives(alts);
}

// ---- fractions: nonempty digit strings D that end in a nonzero digit, compared as the values 0.D ----

const char* const kAnyFraction = "[0-9]{0,15} [1-9]";  // also bounds the fraction like json-number

// D with 0.D >= 0.B (> when strict).
std::string frac_at_least(const std::string& b, bool strict) {
  if (b.empty()) return kAnyFraction;
  std::vector<std::string> alts;
  if (b[0] < '9') alts.push_back(digit_class(static_cast<char>(b[0] + 1), '9') + " ([0-9]{0,15} [1-9])?");
  const std::string rest = b.substr(1);
  const bool may_end = b[0] != '0' && rest.empty() && !strict;
  alts.push_back(fmt::format("\"{}\" {}{}", b[0], group(frac_at_least(rest, strict)), may_end ? "?" : ""));
  return alternatives(alts);
}

// D with 0.D <= 0.B (< when strict); nullopt when none.
std::optional<std::string> frac_at_most(const std::string& b, bool strict) {
  if (b.empty()) return std::nullopt;
  std::vector<std::string> alts;
  if (b[0] > '0') alts.push_back(digit_class('0', static_cast<char>(b[0] - 1)) + " " + kAnyFraction);
  if (b[0] > '1') alts.push_back(digit_class('1', static_cast<char>(b[0] - 1)));
  const std::string rest = b.substr(1);
  const bool may_end = b[0] != '0' && (!rest.empty() || !strict);
  const std::optional<std::string> tail = frac_at_most(rest, strict);
  if (tail)
    alts.push_back(fmt::format("\"{}\" {}{}", b[0], group(*tail), may_end ? "?" : ""));
  else if (may_end)
    alts.push_back(fmt::format("\"{}\"", b[0]));
  if (alts.empty()) return std::nullopt;
  return alternatives(alts);
}

// D with 0.A <(=) 0.D <(=) 0.H, where 0.A < 0.H; nullopt when none.
std::optional<std::string> frac_between(const std::string& a, bool a_strict, const std::string& h, bool h_strict) {
  if (a.empty()) return frac_at_most(h, h_strict);
  if (h.empty()) return std::nullopt;
  const std::string ar = a.substr(1), hr = h.substr(1);
  std::vector<std::string> alts;
  if (a[0] == h[0]) {
    const bool may_end = a[0] != '0' && ar.empty() && !a_strict && (!hr.empty() || !h_strict);
    const std::optional<std::string> tail = frac_between(ar, a_strict, hr, h_strict);
    if (tail) alts.push_back(fmt::format("\"{}\" {}{}", a[0], group(*tail), may_end ? "?" : ""));
    if (!tail && may_end) alts.push_back(fmt::format("\"{}\"", a[0]));
  } else {
    const bool a_may_end = a[0] != '0' && ar.empty() && !a_strict;
    alts.push_back(fmt::format("\"{}\" {}{}", a[0], group(frac_at_least(ar, a_strict)), a_may_end ? "?" : ""));
    if (a[0] + 1 <= h[0] - 1)
      alts.push_back(digit_class(static_cast<char>(a[0] + 1), static_cast<char>(h[0] - 1)) + " ([0-9]{0,15} [1-9])?");
    const bool h_may_end = !hr.empty() || !h_strict;
    const std::optional<std::string> tail = frac_at_most(hr, h_strict);
    if (tail)
      alts.push_back(fmt::format("\"{}\" {}{}", h[0], group(*tail), h_may_end ? "?" : ""));
    else if (h_may_end)
      alts.push_back(fmt::format("\"{}\"", h[0]));
  }
  if (alts.empty()) return std::nullopt;
  return alternatives(alts);
}

int compare_decimal(const Decimal& a, const Decimal& b) {  // both non-negative
  const int c = compare_mag(a.int_digits, b.int_digits);
  if (c != 0) return c;
  const size_t n = std::max(a.frac_digits.size(), b.frac_digits.size());
  const std::string fa = a.frac_digits + std::string(n - a.frac_digits.size(), '0');
  const std::string fb = b.frac_digits + std::string(n - b.frac_digits.size(), '0');
  return fa.compare(fb) < 0 ? -1 : (fa == fb ? 0 : 1);
}

// Non-negative numbers written I or I.D with lo <(=) x <(=) hi (hi nullopt: open).
std::string magnitude_range(const Decimal& lo, bool lo_ex, const std::optional<Decimal>& hi, bool hi_ex,
                            size_t open_digits) {
  if (hi) {
    const int c = compare_decimal(lo, *hi);
    if (c > 0 || (c == 0 && (lo_ex || hi_ex))) return "";
  }
  std::vector<std::string> alts;
  const Int ilo = lo_ex ? plus_one(floor_of(lo)) : ceil_of(lo);
  std::optional<std::string> ihi;
  bool no_ints = false;
  if (hi) {
    const Int h = hi_ex ? minus_one(ceil_of(*hi)) : floor_of(*hi);
    no_ints = h.negative;
    ihi = h.mag;
  }
  if (!no_ints) {
    const std::string ints = uint_range(ilo.mag, ihi, open_digits);
    if (!ints.empty()) alts.push_back(ints);
  }
  const std::string& li = lo.int_digits;
  auto frac = [](const std::string& d) { return "\".\" " + group(d); };
  if (!hi || compare_mag(li, hi->int_digits) < 0) {
    alts.push_back(fmt::format("\"{}\" {}", li, frac(frac_at_least(lo.frac_digits, lo_ex))));
    const std::string first_inner = add_one(li);
    if (!hi || compare_mag(first_inner, hi->int_digits) < 0) {
      std::optional<std::string> last_inner;
      if (hi) last_inner = sub_one(hi->int_digits);
      alts.push_back(uint_range(first_inner, last_inner, open_digits) + " " + frac(kAnyFraction));
    }
    if (hi)
      if (std::optional<std::string> f = frac_at_most(hi->frac_digits, hi_ex))
        alts.push_back(fmt::format("\"{}\" {}", hi->int_digits, frac(*f)));
  } else if (std::optional<std::string> f = frac_between(lo.frac_digits, lo_ex, hi->frac_digits, hi_ex)) {
    alts.push_back(fmt::format("\"{}\" {}", li, frac(*f)));
  }
  if (alts.empty()) return "";
  return alternatives(alts);
}

Decimal magnitude(const Decimal& d) { return {false, d.int_digits, d.frac_digits}; }

int compare_signed(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = compare_decimal(magnitude(a), magnitude(b));
  return a.negative ? -c : c;
}

}  // namespace

std::optional<Decimal> parse_decimal(const std::string& text) {
  size_t i = 0;
  Decimal d;
  if (i < text.size() && text[i] == '-') d.negative = true, ++i;
  std::string digits;
  long long point = -1;
  for (; i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      if (point >= 0) return std::nullopt;
      point = static_cast<long long>(digits.size());
    } else {
      digits += text[i];
    }
  }
  if (digits.empty() || digits.size() > kMaxBoundDigits) return std::nullopt;
  if (point < 0) point = static_cast<long long>(digits.size());
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool neg = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    long long e = 0;
    if (i >= text.size()) return std::nullopt;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      e = e * 10 + (text[i] - '0');
      if (e > static_cast<long long>(kMaxBoundDigits)) return std::nullopt;
    }
    point += neg ? -e : e;
  }
  if (i != text.size()) return std::nullopt;
  if (point < 0) digits.insert(0, static_cast<size_t>(-point), '0'), point = 0;
  if (point > static_cast<long long>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
  if (digits.size() > kMaxBoundDigits) return std::nullopt;
  std::string ip = digits.substr(0, static_cast<size_t>(point)), fp = digits.substr(static_cast<size_t>(point));
  const size_t nz = ip.find_first_not_of('0');
  d.int_digits = nz == std::string::npos ? "0" : ip.substr(nz);
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  d.frac_digits = fp;
  if (d.is_zero()) d.negative = false;
  return d;
}

std::string integer_range_gbnf(const NumberRange& r, size_t open_digits) {
  std::optional<Int> lo, hi;
  if (r.lo) lo = r.lo_exclusive ? plus_one(floor_of(*r.lo)) : ceil_of(*r.lo);
  if (r.hi) hi = r.hi_exclusive ? minus_one(ceil_of(*r.hi)) : floor_of(*r.hi);
  if (lo && hi && compare_int(*lo, *hi) > 0) return "";
  std::vector<std::string> alts;
  if (!hi || !hi->negative) {
    const std::string nn = uint_range(lo && !lo->negative ? lo->mag : "0",
                                      hi ? std::optional<std::string>(hi->mag) : std::nullopt, open_digits);
    if (!nn.empty()) alts.push_back(nn);
  }
  if (!lo || lo->negative) {
    const std::string neg = uint_range(hi && hi->negative ? hi->mag : "1",
                                       lo ? std::optional<std::string>(lo->mag) : std::nullopt, open_digits);
    if (!neg.empty()) alts.push_back("\"-\" " + neg);
  }
  if (alts.empty()) return "";
  return alternatives(alts);
}

std::string number_range_gbnf(const NumberRange& r, size_t open_digits) {
  if (r.lo && r.hi) {
    const int c = compare_signed(*r.lo, *r.hi);
    if (c > 0 || (c == 0 && (r.lo_exclusive || r.hi_exclusive))) return "";
  }
  std::vector<std::string> alts;
  const bool hi_nonneg = !r.hi || !r.hi->negative;
  if (hi_nonneg) {  // x >= 0
    const bool lo_nonneg = r.lo && !r.lo->negative;
    const Decimal lo = lo_nonneg ? *r.lo : Decimal{};
    std::optional<Decimal> hi;
    if (r.hi) hi = *r.hi;
    const std::string nn = magnitude_range(lo, lo_nonneg && r.lo_exclusive, hi, r.hi_exclusive, open_digits);
    if (!nn.empty()) alts.push_back(nn);
  }
  if (!r.lo || r.lo->negative) {  // x = -m, m > 0
    const bool from_hi = r.hi && r.hi->negative;
    const Decimal mlo = from_hi ? magnitude(*r.hi) : Decimal{};
    std::optional<Decimal> mhi;
    if (r.lo) mhi = magnitude(*r.lo);
    const std::string neg = magnitude_range(mlo, from_hi ? r.hi_exclusive : true, mhi, r.lo_exclusive, open_digits);
    if (!neg.empty()) alts.push_back("\"-\" " + neg);
  }
  if (alts.empty()) return "";
  return alternatives(alts);
}

}  // namespace kvik::structured
