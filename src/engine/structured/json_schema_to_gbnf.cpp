#include "engine/structured/json_schema_to_gbnf.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema_converter.h"
#include "engine/structured/json_schema_formats.h"

namespace kvik::structured {

namespace {

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

// How far past the grammar-size limit the compiler goes on measuring before it stops (to say by how much).
constexpr size_t kMeasureFactor = 16;

// A first pass over the text (nlohmann's SAX parser does not recurse) refuses what would make the DOM or the compiler
// slow or deep before either exists: values nested deeper than kMaxJsonNesting, objects with more than
// kMaxObjectMembers members (an ordered_json object looks its keys up one by one, so building one of n members costs
// n² comparisons).
constexpr size_t kMaxJsonNesting = 256;
constexpr size_t kMaxObjectMembers = 1000;

// Measures the whole text (to say by how much a bound is exceeded) and keeps no values.
struct ShapeCheck : nlohmann::json_sax<SchemaJson> {
  std::vector<size_t> members;  // per open container: members so far (objects), or SIZE_MAX (arrays)
  size_t max_depth = 0, max_members = 0;
  std::string error;
  bool open(bool object) {
    members.push_back(object ? 0 : SIZE_MAX);
    max_depth = std::max(max_depth, members.size());
    return true;
  }
  bool close() {
    members.pop_back();
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool key(string_t&) override {
    max_members = std::max(max_members, ++members.back());
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = fmt::format("not valid JSON: {}", e.what());
    return false;
  }
};

SchemaJson parse_schema(std::string_view text) {
  ShapeCheck check;
  SchemaJson::sax_parse(text, &check);
  if (!check.error.empty()) fail("json_schema: {}", check.error);
  if (check.max_depth > kMaxJsonNesting)
    fail("json_schema: the schema nests values {} deep, more than the limit of {}", check.max_depth, kMaxJsonNesting);
  if (check.max_members > kMaxObjectMembers)
    fail("json_schema: an object of the schema has {} members, more than the limit of {}", check.max_members,
         kMaxObjectMembers);
  return SchemaJson::parse(text);
}

}  // namespace

SchemaConverter::SchemaConverter(const SchemaJson& root, std::string prefix, const JsonSchemaLimits& limits)
    : root_(root), prefix_(std::move(prefix)), limits_(limits) {}

SchemaRules SchemaConverter::convert() {
  std::string start = visit(root_, "");
  if (start.empty()) error("", "no JSON value satisfies the schema");
  if (grammar_bytes_ > limits_.max_grammar_bytes)
    fail("json_schema: the grammar has {} bytes, more than the limit of {} ({:.1f}x)", grammar_bytes_,
         limits_.max_grammar_bytes, static_cast<double>(grammar_bytes_) / limits_.max_grammar_bytes);
  SchemaRules out;
  out.start = std::move(start);
  for (const auto& line : rules_) out.rules += line;
  out.not_enforced = std::move(not_enforced_);
  return out;
}

void SchemaConverter::error(const std::string& path, const std::string& what) {
  fail("json_schema: at {}: {}", path.empty() ? "/" : path, what);
}

void SchemaConverter::note(const std::string& path, const std::string& what) {
  if (not_enforced_.size() < 1000) not_enforced_.push_back(fmt::format("at {}: {}", path.empty() ? "/" : path, what));
}

void SchemaConverter::charge(const std::string& path, size_t units) {
  work_ += units;
  if (work_ > limits_.max_work)
    fail(
        "json_schema: at {}: compiling the schema takes more than the work limit of {} steps (subschemas, merges, "
        "rules, object states)",
        path.empty() ? "/" : path, limits_.max_work);
}

std::string SchemaConverter::reserve_rule(const std::string& hint) {
  std::string base;
  for (char c : hint)
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')
      base += c;
    else if (!base.empty() && base.back() != '-')
      base += '-';
  if (base.empty() || base.size() > 40) base = "schema";
  const std::string name = fmt::format("{}s{}-{}", prefix_, rules_.size(), base);
  rules_.emplace_back();
  return name;
}

void SchemaConverter::define_rule(const std::string& name, const std::string& body) {
  // The rule's slot is the number after the prefix's "s".
  const size_t slot = std::stoul(name.substr(prefix_.size() + 1));
  rules_[slot] = name + " ::= " + body + "\n";
  grammar_bytes_ += rules_[slot].size();
  charge(name);
  if (grammar_bytes_ > limits_.max_grammar_bytes * kMeasureFactor)
    fail("json_schema: the grammar has more than {} bytes, more than {}x the limit of {}", grammar_bytes_,
         kMeasureFactor, limits_.max_grammar_bytes);
}

std::string SchemaConverter::new_rule(const std::string& hint, const std::string& body) {
  const std::string name = reserve_rule(hint);
  define_rule(name, body);
  return name;
}

std::string SchemaConverter::use_format(const std::string& format) {
  if (auto it = formats_.find(format); it != formats_.end()) return it->second;
  std::optional<FormatGrammar> g = format_gbnf(format, fmt::format("{}f{}-", prefix_, formats_.size()));
  if (!g) return "";
  rules_.push_back(g->rules);
  grammar_bytes_ += g->rules.size();
  formats_[format] = g->start;
  return g->start;
}

SchemaRules json_schema_rules(std::string_view schema_text, const std::string& prefix, const JsonSchemaLimits& limits) {
  if (schema_text.size() > limits.max_schema_bytes)
    fail("json_schema: the schema has {} bytes, more than the limit of {} ({:.1f}x)", schema_text.size(),
         limits.max_schema_bytes, static_cast<double>(schema_text.size()) / limits.max_schema_bytes);
  const SchemaJson schema = parse_schema(schema_text);
  if (!schema.is_object() && !schema.is_boolean())
    fail("json_schema: a schema must be a JSON object or a boolean, not {}", schema.type_name());
  return SchemaConverter(schema, prefix, limits).convert();
}

std::string json_primitives_gbnf(bool compact) {
  if (!compact) return kPrimitives;
  std::string p = kPrimitives;
  return "ws ::= \" \"?\n" + p.substr(p.find('\n') + 1);
}

std::string json_schema_to_gbnf(std::string_view schema_text, const JsonSchemaLimits& limits) {
  const SchemaRules r = json_schema_rules(schema_text, "", limits);
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
