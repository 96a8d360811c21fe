// Numeric ranges of JSON Schema (minimum / maximum / exclusiveMinimum / exclusiveMaximum) as GBNF, for bounds of
// any size: the bounds are exact decimal digit strings (never int64 or double arithmetic), and a range compiles to a
// grammar linear in its number of digits — a sub-range 00…0–99…9 collapses to `[0-9]{n}`, the idea of llama.cpp's
// _build_min_max_int — so [0, 2^63) is a few hundred bytes.
//
// The texts accepted are canonical: no leading zeros, no "-0", no exponent, and a fraction (numbers only) that ends
// in a nonzero digit. Every accepted text lies inside the range; every value of the range (within the digit limit
// for an open side) has its canonical text accepted.
#pragma once

#include <optional>
#include <string>

namespace kvik::structured {

// A finite decimal: sign, integer digits (no leading zeros, "0" for zero) and fraction digits (no trailing zeros).
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
};

// The exact decimal of a JSON number's text ("12", "-0.5", "1e+20", "9007199254740991"); nullopt when `text` is not
// a finite JSON number or has more than kMaxBoundDigits digits once expanded.
inline constexpr size_t kMaxBoundDigits = 400;
std::optional<Decimal> parse_decimal(const std::string& text);

struct NumberRange {
  std::optional<Decimal> lo, hi;  // nullopt: open on that side
  bool lo_exclusive = false, hi_exclusive = false;
};

// GBNF expression of the canonical integers inside the range; an open side allows up to `open_digits` digits (or
// the bound's digit count, if more). "" when the range holds no integer.
std::string integer_range_gbnf(const NumberRange& r, size_t open_digits);

// The same for numbers: integers and decimals with a fraction (no exponent). "" when the range is empty.
std::string number_range_gbnf(const NumberRange& r, size_t open_digits);

}  // namespace kvik::structured
