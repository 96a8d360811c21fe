// The `format` values of JSON Schema that a grammar enforces: date-time, date, time, duration, uuid, email,
// hostname, ipv4, ipv6, uri (and uri-reference). Each is a GBNF expression for the text inside the JSON string.
//
// The rule each grammar follows: every string it accepts is valid for ajv-formats' "full" checks (RFC 3339 dates
// with the real number of days in each month, leap years included; times with a time zone; RFC 3986 URIs), and it
// accepts the forms models and people write. Where the RFC allows rarities (quoted e-mail local parts, IP-literal
// URI hosts, leap seconds, lowercase "t"/"z") the grammar leaves them out, as llama.cpp and xgrammar do.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvik::structured {

struct FormatGrammar {
  std::string start;  // expression for the string's content
  std::string rules;  // rules it needs, names beginning with the prefix given
};

// nullopt for a format this module does not know (the caller accepts any string).
std::optional<FormatGrammar> format_gbnf(std::string_view format, const std::string& prefix);

}  // namespace kvik::structured
