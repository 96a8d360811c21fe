#include "engine/structured/json_schema_formats.h"

#include <cctype>
#include <map>
#include <set>
#include <vector>

namespace kvik::structured {

namespace {

// Rules written with "{P}" where the caller's prefix goes; a rule refers to others by their {P} names.
const std::map<std::string, std::string, std::less<>>& format_rules() {
  static const std::map<std::string, std::string, std::less<>> rules = {
      // RFC 3339 full-date with the days of each month; 29 February only in leap years (divisible by 4, centuries
      // by 400).
      {"fmt-date",
       R"([0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) | {P}fmt-leap-year "-02-29")"},
      {"fmt-leap-year",
       R"([0-9]{2} ("0" [48] | [2468] [048] | [13579] [26]) | ("0" [048] | [2468] [048] | [13579] [26]) "00")"},
      // RFC 3339 full-time: the offset is required (ajv-formats' "time" rejects a time without one).
      {"fmt-time",
       R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
      {"fmt-date-time", R"({P}fmt-date "T" {P}fmt-time)"},
      // ISO 8601 duration as ajv-formats checks it: P with date parts in order, T with at least one time part,
      // or weeks alone.
      {"fmt-duration", R"("P" ({P}fmt-dur-date {P}fmt-dur-time? | {P}fmt-dur-time | {P}fmt-dur-n "W"))"},
      {"fmt-dur-date",
       R"({P}fmt-dur-n "Y" ({P}fmt-dur-n "M")? ({P}fmt-dur-n "D")? | {P}fmt-dur-n "M" ({P}fmt-dur-n "D")? | {P}fmt-dur-n "D")"},
      {"fmt-dur-time",
       R"("T" ({P}fmt-dur-n "H" ({P}fmt-dur-n "M")? ({P}fmt-dur-n "S")? | {P}fmt-dur-n "M" ({P}fmt-dur-n "S")? | {P}fmt-dur-n "S"))"},
      {"fmt-dur-n", R"([0-9]{1,9})"},
      {"fmt-uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
      // Dot-atom local part of the common characters (also what zod's e-mail pattern allows), a domain of
      // hostname labels ending in an alphabetic top-level label.
      {"fmt-email",
       R"([a-zA-Z0-9_+-] ([a-zA-Z0-9_+-]{0,63} ("." [a-zA-Z0-9_+-]{1,64})*) "@" ({P}fmt-label ".")+ [a-zA-Z]{2,24})"},
      {"fmt-label", R"([a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?)"},
      // RFC 1123 labels of 1-63 characters (at most 8 of them; their 253-character total is not counted).
      {"fmt-hostname", R"({P}fmt-label ("." {P}fmt-label){0,7})"},
      {"fmt-ipv4", R"({P}fmt-dec-octet "." {P}fmt-dec-octet "." {P}fmt-dec-octet "." {P}fmt-dec-octet)"},
      {"fmt-dec-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])"},
      // RFC 4291 text forms, as RFC 3986's IPv6address: eight groups, or fewer around one "::", an IPv4 tail.
      {"fmt-ipv6",
       R"(({P}fmt-h16 ":"){6} {P}fmt-ls32 | "::" ({P}fmt-h16 ":"){5} {P}fmt-ls32 | {P}fmt-h16? "::" ({P}fmt-h16 ":"){4} {P}fmt-ls32 | (({P}fmt-h16 ":"){0,1} {P}fmt-h16)? "::" ({P}fmt-h16 ":"){3} {P}fmt-ls32 | (({P}fmt-h16 ":"){0,2} {P}fmt-h16)? "::" ({P}fmt-h16 ":"){2} {P}fmt-ls32 | (({P}fmt-h16 ":"){0,3} {P}fmt-h16)? "::" {P}fmt-h16 ":" {P}fmt-ls32 | (({P}fmt-h16 ":"){0,4} {P}fmt-h16)? "::" {P}fmt-ls32 | (({P}fmt-h16 ":"){0,5} {P}fmt-h16)? "::" {P}fmt-h16 | (({P}fmt-h16 ":"){0,6} {P}fmt-h16)? "::")"},
      {"fmt-h16", R"([0-9a-fA-F]{1,4})"},
      {"fmt-ls32", R"({P}fmt-h16 ":" {P}fmt-h16 | {P}fmt-ipv4)"},
      // RFC 3986 URI: scheme ":" then an authority and path, or a path; query and fragment. The host is a
      // registered name or an IPv4 address.
      {"fmt-uri", R"([a-zA-Z] [a-zA-Z0-9+.-]* ":" {P}fmt-uri-hier ("?" {P}fmt-uri-query)? ("#" {P}fmt-uri-query)?)"},
      {"fmt-uri-hier",
       R"("//" ({P}fmt-uri-user "@")? {P}fmt-uri-host (":" [0-9]{0,5})? ("/" {P}fmt-pchar*)* | "/" ({P}fmt-pchar+ ("/" {P}fmt-pchar*)*)? | {P}fmt-pchar+ ("/" {P}fmt-pchar*)*)"},
      {"fmt-uri-user", R"(([a-zA-Z0-9._~!$&'()*+,;=:-] | {P}fmt-pct)*)"},
      {"fmt-uri-host", R"({P}fmt-ipv4 | ([a-zA-Z0-9._~!$&'()*+,;=-] | {P}fmt-pct)*)"},
      {"fmt-pchar", R"([a-zA-Z0-9._~!$&'()*+,;=:@-] | {P}fmt-pct)"},
      {"fmt-pct", R"("%" [0-9a-fA-F] [0-9a-fA-F])"},
      {"fmt-uri-query", R"(([a-zA-Z0-9._~!$&'()*+,;=:@/?-] | {P}fmt-pct)*)"},
  };
  return rules;
}

std::string with_prefix(const std::string& body, const std::string& prefix) {
  std::string out;
  for (size_t i = 0; i < body.size();) {
    if (body.compare(i, 3, "{P}") == 0) {
      out += prefix;
      i += 3;
    } else {
      out += body[i++];
    }
  }
  return out;
}

// The rules `name` needs (itself included), in a stable order.
void collect(const std::string& name, std::set<std::string>& seen, std::vector<std::string>& order) {
  if (!seen.insert(name).second) return;
  order.push_back(name);
  const std::string& body = format_rules().find(name)->second;
  for (size_t i = body.find("{P}"); i != std::string::npos; i = body.find("{P}", i + 3)) {
    size_t end = i + 3;
    while (end < body.size() && (std::isalnum(static_cast<unsigned char>(body[end])) || body[end] == '-')) ++end;
    collect(body.substr(i + 3, end - i - 3), seen, order);
  }
}

}  // namespace

std::optional<FormatGrammar> format_gbnf(std::string_view format, const std::string& prefix) {
  std::string name = "fmt-" + std::string(format);
  if (format == "url" || format == "iri") name = "fmt-uri";
  if (format == "idn-email") name = "fmt-email";
  if (format == "idn-hostname") name = "fmt-hostname";
  if (format.substr(0, 4) == "uuid" && format.size() == 5 && format[4] >= '1' && format[4] <= '5') name = "fmt-uuid";
  static const std::set<std::string, std::less<>> kPublic = {"fmt-date", "fmt-time",  "fmt-date-time", "fmt-duration",
                                                             "fmt-uuid", "fmt-email", "fmt-hostname",  "fmt-ipv4",
                                                             "fmt-ipv6", "fmt-uri"};
  if (!kPublic.count(name)) return std::nullopt;
  std::set<std::string> seen;
  std::vector<std::string> order;
  collect(name, seen, order);
  FormatGrammar g;
  g.start = prefix + name;
  for (const std::string& r : order)
    g.rules += prefix + r + " ::= " + with_prefix(format_rules().find(r)->second, prefix) + "\n";
  return g;
}

}  // namespace kvik::structured
