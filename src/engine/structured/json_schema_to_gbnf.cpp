#include "engine/structured/json_schema_to_gbnf.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/regex_to_gbnf.h"

namespace kvik::structured {

namespace {

// Ordered: properties are generated in the schema's order, the order the model was shown.
using json = nlohmann::ordered_json;

// The JSON lexical rules. Whitespace is bounded so that a model which does not know JSON cannot spend
// its whole budget on blanks; \u escapes leave out surrogates so that a string's length in the schema's
// sense equals its number of characters here (minLength/maxLength).
constexpr const char* kPrimitives = R"(ws ::= [ \t\n]{0,4}
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws (json-string ws ":" ws json-value ws ("," ws json-string ws ":" ws json-value ws)*)? "}"
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
)";

// Integer ranges as digit grammars (the idea of llama.cpp's _build_min_max_int): canonical decimals only (no
// leading zeros, no "-0"), at most kMaxDigits digits like json-integer.
constexpr int kMaxDigits = 16;
constexpr int64_t kMaxMagnitude = 9999999999999999;  // 16 nines

// L-digit strings (leading zeros allowed) whose values lie in [lo, hi]; lo and hi have the same length.
std::string digits_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo.size() == 1) return lo == hi ? fmt::format("\"{}\"", lo) : fmt::format("[{}-{}]", lo, hi);
  const std::string lrest = lo.substr(1), hrest = hi.substr(1);
  if (lo[0] == hi[0]) return fmt::format("\"{}\" {}", lo[0], digits_range(lrest, hrest));
  const size_t n = lrest.size();
  std::string body = fmt::format("\"{}\" {}", lo[0], digits_range(lrest, std::string(n, '9')));
  if (lo[0] + 1 <= hi[0] - 1)
    body += fmt::format(" | [{}-{}] [0-9]{{{}}}", static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1), n);
  body += fmt::format(" | \"{}\" {}", hi[0], digits_range(std::string(n, '0'), hrest));
  return "(" + body + ")";
}

int64_t pow10(size_t n) {
  int64_t p = 1;
  while (n--) p *= 10;
  return p;
}

// Non-negative integers in [a, b] (b < 0: no upper bound); "" when the range is empty.
std::string uint_range(int64_t a, int64_t b) {
  if (b >= 0 && b < a) return "";
  const size_t la = std::to_string(a).size();
  const size_t lb = b < 0 ? kMaxDigits : std::to_string(b).size();
  std::string body;
  for (size_t len = la; len <= lb; ++len) {
    if (b < 0 && len > la) {  // every longer number
      body += fmt::format(" | [1-9] [0-9]{{{},{}}}", la, kMaxDigits - 1);
      break;
    }
    const int64_t lo = len == la ? a : pow10(len - 1);
    const int64_t hi = b < 0 || len < lb ? pow10(len) - 1 : b;
    body += " | " + digits_range(std::to_string(lo), std::to_string(hi));
  }
  return "(" + body.substr(3) + ")";
}

// Integers in [lo, hi], either bound optional; "" when empty.
std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *hi < *lo) return "";
  if (lo && *lo >= 0) return uint_range(*lo, hi ? *hi : -1);
  if (hi && *hi < 0) return "(\"-\" " + uint_range(-*hi, lo ? -*lo : -1) + ")";
  const std::string neg = "\"-\" " + uint_range(1, lo ? -*lo : -1);
  return "(" + neg + " | " + uint_range(0, hi ? *hi : -1) + ")";
}

const std::set<std::string, std::less<>> kAnnotations = {"title",    "description", "default",  "examples",
                                                         "$schema",  "$id",         "$comment", "deprecated",
                                                         "readOnly", "writeOnly",   "$defs",    "definitions"};

class SchemaConverter {
 public:
  SchemaConverter(const json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  // The rules of the schema (without the primitives) and the expression that matches it.
  std::pair<std::string, std::string> convert() {
    const std::string start = visit(root_, "");
    std::string rules;
    for (const auto& line : rules_) rules += line;
    return {start, rules};
  }

 private:
  [[noreturn]] static void error(const std::string& path, const std::string& what) {
    fail("json_schema: at {}: {}", path.empty() ? "/" : path, what);
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string base;
    for (char c : hint)
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')
        base += c;
      else if (!base.empty() && base.back() != '-')
        base += '-';
    if (base.empty() || base.size() > 40) base = "schema";
    const std::string name = fmt::format("{}s{}-{}", prefix_, rules_.size(), base);
    rules_.push_back(name + " ::= " + body + "\n");
    if (rules_.size() > 100000) error("", "the schema is too large");
    return name;
  }

  static std::string literal(const json& v) { return gbnf_literal(v.dump()); }

  void check_keywords(const json& s, const std::string& path, std::initializer_list<const char*> allowed) {
    for (const auto& [k, v] : s.items()) {
      if (kAnnotations.count(k)) continue;
      bool ok = false;
      for (const char* a : allowed) ok |= k == a;
      if (!ok) error(path, fmt::format("unsupported keyword '{}'", k));
    }
  }

  const json& resolve_ref(const std::string& ref, const std::string& path) {
    if (ref == "#") return root_;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (ref.rfind(p, 0) == 0) {
        const std::string container = p.substr(2, p.size() - 3);
        const std::string name = ref.substr(p.size());
        if (root_.contains(container) && root_[container].is_object() && root_[container].contains(name))
          return root_[container][name];
        error(path, fmt::format("$ref '{}' points to nothing", ref));
      }
    }
    error(path, fmt::format("only local $ref (#/$defs/NAME, #/definitions/NAME, #) is supported, not '{}'", ref));
  }

  std::string visit(const json& s, const std::string& path) {
    if (++depth_ > 64) error(path, "nesting deeper than 64");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) error(path, "the schema 'false' allows nothing");
      return "json-value";
    }
    if (!s.is_object()) error(path, "a schema must be an object or a boolean");
    if (s.contains("$ref")) return ref(s, path);
    if (std::optional<std::string> body = combination(s, path)) return *body;
    return typed(s, path);
  }

  std::string ref(const json& s, const std::string& path) {
    check_keywords(s, path, {"$ref"});
    if (!s["$ref"].is_string()) error(path, "$ref must be a string");
    const std::string ref = s["$ref"];
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    // Name the rule before visiting so that a recursive definition refers to itself.
    const std::string name = fmt::format("{}ref{}", prefix_, refs_.size());
    refs_[ref] = name;
    const std::string body = visit(resolve_ref(ref, path), path + "/$ref");
    rules_.push_back(name + " ::= " + body + "\n");
    return name;
  }

  // const, enum, anyOf / oneOf and allOf; nullopt when the schema has none of them.
  std::optional<std::string> combination(const json& s, const std::string& path) {
    if (s.contains("const")) {
      check_keywords(s, path, {"const", "type"});
      return literal(s["const"]);
    }
    if (s.contains("enum")) {
      check_keywords(s, path, {"enum", "type"});
      if (!s["enum"].is_array() || s["enum"].empty()) error(path, "enum must be a non-empty array");
      std::string body;
      for (const auto& v : s["enum"]) body += (body.empty() ? "" : " | ") + literal(v);
      return "(" + body + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      check_keywords(s, path, {key});
      if (!s[key].is_array() || s[key].empty()) error(path, fmt::format("{} must be a non-empty array", key));
      std::string body;
      for (size_t i = 0; i < s[key].size(); ++i)
        body += (i ? " | " : "") + visit(s[key][i], fmt::format("{}/{}/{}", path, key, i));
      return "(" + body + ")";
    }
    if (s.contains("allOf")) {
      check_keywords(s, path, {"allOf"});
      if (!s["allOf"].is_array() || s["allOf"].size() != 1) error(path, "allOf is supported only with one schema");
      return visit(s["allOf"][0], path + "/allOf/0");
    }
    return std::nullopt;
  }

  // The types the schema allows: its "type", else what its keywords imply; empty when it constrains nothing.
  static std::vector<std::string> types_of(const json& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string())
        types.push_back(t);
      else if (t.is_array())
        for (const auto& x : t) {
          if (!x.is_string()) error(path, "type must be a string or an array of strings");
          types.push_back(x);
        }
      else
        error(path, "type must be a string or an array of strings");
      if (types.empty()) error(path, "type is an empty list");
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types.push_back("number");
    }
    return types;
  }

  std::string typed(const json& s, const std::string& path) {
    const std::vector<std::string> types = types_of(s, path);
    if (types.empty()) {
      check_keywords(s, path, {});
      return "json-value";
    }
    check_keywords(s, path,
                   {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                    "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"});
    std::string body;
    for (const std::string& t : types) {
      std::string alt;
      if (t == "object")
        alt = object(s, path);
      else if (t == "array")
        alt = array(s, path);
      else if (t == "string")
        alt = string(s, path);
      else if (t == "number")
        alt = number(s, path, false);
      else if (t == "integer")
        alt = number(s, path, true);
      else if (t == "boolean")
        alt = "json-boolean";
      else if (t == "null")
        alt = "json-null";
      else
        error(path, fmt::format("unknown type '{}'", t));
      body += (body.empty() ? "" : " | ") + alt;
    }
    return types.size() == 1 ? body : "(" + body + ")";
  }

  static int64_t count_keyword(const json& s, const char* key, const std::string& path, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      error(path, fmt::format("{} must be a non-negative integer", key));
    if (v.get<int64_t>() > kMaxRepetition)
      error(path, fmt::format("{} above the supported limit of {}", key, kMaxRepetition));
    return v.get<int64_t>();
  }

  static std::string repeat_suffix(int64_t min, int64_t max) {  // max < 0: unbounded
    if (max < 0) return fmt::format("{{{},}}", min);
    return fmt::format("{{{},{}}}", min, max);
  }

  // A numeric bound: minimum/maximum, and exclusiveMinimum/exclusiveMaximum as numbers (draft 6+) or as booleans
  // that make minimum/maximum exclusive (draft 4). nullopt when absent.
  struct Bound {
    double value;
    bool exclusive;
  };
  static std::optional<Bound> bound(const json& s, const char* key, const char* exclusive_key,
                                    const std::string& path) {
    std::optional<Bound> b;
    if (s.contains(key)) {
      if (!s[key].is_number()) error(path, fmt::format("{} must be a number", key));
      b = Bound{s[key].get<double>(), false};
    }
    if (s.contains(exclusive_key)) {
      const json& e = s[exclusive_key];
      if (e.is_boolean()) {
        if (e.get<bool>() && !b) error(path, fmt::format("{}: true needs {}", exclusive_key, key));
        if (b) b->exclusive = e.get<bool>();
      } else if (e.is_number()) {
        const Bound x{e.get<double>(), true};
        const bool tighter = !b || (std::string(key) == "minimum" ? x.value >= b->value : x.value <= b->value);
        if (tighter) b = x;
      } else {
        error(path, fmt::format("{} must be a number or a boolean", exclusive_key));
      }
    }
    if (b && !(std::abs(b->value) <= 1e300)) error(path, fmt::format("{} must be finite", key));
    return b;
  }

  // integer / number with bounds. Integers: exactly the range. Numbers: the integers of the range, and
  // k.ddd (a fraction ending in a nonzero digit, no exponent) for each integer part k whose whole unit interval
  // lies inside the range — every output is in range; non-integers too close to a fractional bound are left out.
  std::string number(const json& s, const std::string& path, bool integer) {
    const std::optional<Bound> lo = bound(s, "minimum", "exclusiveMinimum", path);
    const std::optional<Bound> hi = bound(s, "maximum", "exclusiveMaximum", path);
    if (!lo && !hi) return integer ? "json-integer" : "json-number";
    auto clamp = [](double v) { return static_cast<int64_t>(std::clamp(v, -1e16, 1e16)); };
    // The integer range: ⌈lo⌉ (⌊lo⌋ + 1 when exclusive) .. ⌊hi⌋ (⌈hi⌉ − 1 when exclusive).
    std::optional<int64_t> ilo, ihi;
    if (lo) ilo = clamp(lo->exclusive ? std::floor(lo->value) + 1 : std::ceil(lo->value));
    if (hi) ihi = clamp(hi->exclusive ? std::ceil(hi->value) - 1 : std::floor(hi->value));
    if (ilo && *ilo > kMaxMagnitude) error(path, "minimum is above the supported magnitude (16 digits)");
    if (ihi && *ihi < -kMaxMagnitude) error(path, "maximum is below the supported magnitude (16 digits)");
    if (ilo && *ilo < -kMaxMagnitude) ilo.reset();
    if (ihi && *ihi > kMaxMagnitude) ihi.reset();
    std::string body = int_range(ilo, ihi);
    if (!integer) {
      const std::string frac = "\".\" [0-9]{0,15} [1-9]";
      // k.f ∈ (k, k+1), k ≥ 0: k ≥ ⌈lo⌉, k + 1 ≤ ⌊hi⌋.
      std::optional<int64_t> klo = std::max<int64_t>(0, lo ? clamp(std::ceil(lo->value)) : 0), khi;
      if (hi) khi = clamp(std::floor(hi->value)) - 1;
      const std::string pos = int_range(klo, khi);
      if (!pos.empty()) body += (body.empty() ? "" : " | ") + pos + " " + frac;
      // −m.f ∈ (−m−1, −m), m ≥ 0: m + 1 ≤ ⌊−lo⌋, m ≥ ⌈−hi⌉.
      std::optional<int64_t> mlo = std::max<int64_t>(0, hi ? clamp(std::ceil(-hi->value)) : 0), mhi;
      if (lo) mhi = clamp(std::floor(-lo->value)) - 1;
      const std::string neg = int_range(mlo, mhi);
      if (!neg.empty()) body += (body.empty() ? "" : " | ") + std::string("\"-\" ") + neg + " " + frac;
    }
    if (body.empty()) error(path, "no value satisfies minimum/maximum");
    return new_rule(path + (integer ? "-integer" : "-number"), body);
  }

  std::string object(const json& s, const std::string& path) {
    const bool has_props = s.contains("properties");
    if (has_props && !s["properties"].is_object()) error(path, "properties must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) error(path, "required must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) error(path, "required must list strings");
        if (!has_props || !s["properties"].contains(r.get<std::string>()))
          error(path, fmt::format("required property '{}' is not in properties", r.get<std::string>()));
        required.insert(r.get<std::string>());
      }
    }
    if (!has_props) {
      if (!s.contains("additionalProperties") || s["additionalProperties"] == true) return "json-object";
      if (s["additionalProperties"] == false) return "\"{\" ws \"}\"";
      const std::string v = visit(s["additionalProperties"], path + "/additionalProperties");
      const std::string kv = "json-string ws \":\" ws " + v + " ws";
      return new_rule(path + "-dict", "\"{\" ws (" + kv + " (\",\" ws " + kv + ")*)? \"}\"");
    }
    // Properties in order. rest_i: properties i.. after at least one was written (each needs a comma);
    // first_i: the same when none was written yet. Optional ones may be skipped; required ones may not.
    std::vector<std::pair<std::string, std::string>> kvs;  // (name, "\"name\" ws : ws value")
    for (const auto& [name, sub] : s["properties"].items()) {
      const std::string v = visit(sub, path + "/properties/" + name);
      kvs.emplace_back(name, literal(json(name)) + " ws \":\" ws " + v + " ws");
    }
    const size_t n = kvs.size();
    std::vector<std::string> rest(n + 1), first(n + 1);
    rest[n] = "\"\"";
    first[n] = "\"\"";
    for (size_t i = n; i-- > 0;) {
      const bool req = required.count(kvs[i].first) > 0;
      const std::string hint = path + "-" + kvs[i].first;
      const std::string after = i + 1 < n ? " " + rest[i + 1] : "";
      rest[i] = new_rule(hint + "-rest",
                         req ? "\",\" ws " + kvs[i].second + after : "(\",\" ws " + kvs[i].second + ")?" + after);
      first[i] = new_rule(hint + "-first", req ? kvs[i].second + after
                                               : kvs[i].second + after + " | " + (i + 1 < n ? first[i + 1] : "\"\""));
    }
    return new_rule(path + "-object", "\"{\" ws " + first[0] + " \"}\"");
  }

  std::string array(const json& s, const std::string& path) {
    const std::string item = s.contains("items") ? visit(s["items"], path + "/items") : "json-value";
    const int64_t min = count_keyword(s, "minItems", path, 0);
    const int64_t max = count_keyword(s, "maxItems", path, -1);
    if (max >= 0 && max < min) error(path, "maxItems is smaller than minItems");
    if (max == 0) return "\"[\" ws \"]\"";
    // [ item (, item){min−1, max−1} ]  — optional as a whole when minItems is 0.
    const std::string more =
        "(\",\" ws " + item + " ws)" + repeat_suffix(std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1);
    const std::string items = item + " ws " + more;
    return new_rule(path + "-array", "\"[\" ws " + (min == 0 ? "(" + items + ")?" : items) + " \"]\"");
  }

  std::string string(const json& s, const std::string& path) {
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength"))
        error(path, "pattern together with minLength/maxLength is not supported");
      if (!s["pattern"].is_string()) error(path, "pattern must be a string");
      try {
        return new_rule(path + "-pattern",
                        "\"\\\"\" " + regex_to_gbnf(s["pattern"].get<std::string>(), true) + " \"\\\"\"");
      } catch (const Error& e) {
        error(path, e.what());
      }
    }
    const int64_t min = count_keyword(s, "minLength", path, 0);
    const int64_t max = count_keyword(s, "maxLength", path, -1);
    if (max >= 0 && max < min) error(path, "maxLength is smaller than minLength");
    if (min == 0 && max < 0) return "json-string";
    return new_rule(path + "-string", "\"\\\"\" json-char" + repeat_suffix(min, max) + " \"\\\"\"");
  }

  const json& root_;
  std::string prefix_;
  std::vector<std::string> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

SchemaRules json_schema_rules(std::string_view schema_text, const std::string& prefix) {
  json schema;
  try {
    schema = json::parse(schema_text);
  } catch (const json::parse_error& e) {
    fail("json_schema: not valid JSON: {}", e.what());
  }
  auto [start, rules] = SchemaConverter(schema, prefix).convert();
  return {start, rules};
}

std::string json_primitives_gbnf(bool compact) {
  if (!compact) return kPrimitives;
  std::string p = kPrimitives;
  return "ws ::= \" \"?\n" + p.substr(p.find('\n') + 1);
}

std::string json_schema_to_gbnf(std::string_view schema_text) {
  const SchemaRules r = json_schema_rules(schema_text, "");
  return "root ::= " + r.start + "\n" + r.rules + kPrimitives;
}

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kPrimitives; }

std::string choice_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("guided_choice: the list of choices is empty");
  std::string body;
  for (const auto& c : choices) body += (body.empty() ? "" : " | ") + gbnf_literal(c);
  return "root ::= " + body + "\n";
}

}  // namespace kvik::structured
