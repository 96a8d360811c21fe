#include "engine/structured/json_schema_converter.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema_numbers.h"
#include "engine/structured/json_schema_pattern.h"

namespace kvik::structured {

namespace {

using json = SchemaJson;

// Keywords this compiler enforces (exactly or as the header says); any other keyword is noted as not enforced.
const std::set<std::string, std::less<>> kEnforced = {"type",
                                                      "enum",
                                                      "const",
                                                      "anyOf",
                                                      "oneOf",
                                                      "allOf",
                                                      "$ref",
                                                      "nullable",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "patternProperties",
                                                      "propertyNames",
                                                      "minProperties",
                                                      "maxProperties",
                                                      "dependentRequired",
                                                      "dependencies",
                                                      "items",
                                                      "prefixItems",
                                                      "additionalItems",
                                                      "minItems",
                                                      "maxItems",
                                                      "minLength",
                                                      "maxLength",
                                                      "pattern",
                                                      "format",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum",
                                                      "unevaluatedProperties",
                                                      "$dynamicRef",
                                                      "$recursiveRef"};

// A JSON value as JSON.stringify writes it (1.0 → 1), so a const/enum literal matches what clients send.
std::string js_text(const json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 1e21) return fmt::format("{:.0f}", d);
    return v.dump();
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + js_text(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    for (const auto& [k, x] : v.items()) out += (out.size() > 1 ? "," : "") + json(k).dump() + ":" + js_text(x);
    return out + "}";
  }
  return v.dump();
}

std::string json_type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))
    return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  return v.is_array() ? "array" : "object";
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "(" : " | ") + a;
  return out + ")";
}

json without(const json& s, std::initializer_list<const char*> keys) {
  json out = s;
  for (const char* k : keys) out.erase(k);
  return out;
}

}  // namespace

std::string SchemaConverter::visit(const json& s, const std::string& path) {
  if (++depth_ > limits_.max_depth)
    fail("json_schema: at {}: subschemas nested deeper than the limit of {}", path.empty() ? "/" : path,
         limits_.max_depth);
  struct Leave {
    int& d;
    ~Leave() { --d; }
  } leave{depth_};
  charge(path);
  if (s.is_boolean()) return s.get<bool>() ? "json-value" : "";
  if (!s.is_object()) error(path, fmt::format("a schema must be an object or a boolean, not {}", s.type_name()));
  return visit_object_schema(s, path);
}

std::string SchemaConverter::visit_object_schema(const json& s, const std::string& path) {
  if (s.contains("$ref") || s.contains("$dynamicRef") || s.contains("$recursiveRef")) return ref(s, path);
  if (s.contains("allOf")) return all_of(s, path);
  if (s.contains("anyOf")) return one_of(s, "anyOf", path);
  if (s.contains("oneOf")) return one_of(s, "oneOf", path);
  if (s.contains("const") || s.contains("enum")) return enumeration(s, path);
  return typed(s, path);
}

// $ref alone is a rule of its own (so recursion refers to itself); beside other keywords it is merged with them.
std::string SchemaConverter::ref(const json& s, const std::string& path) {
  const char* key = s.contains("$ref") ? "$ref" : s.contains("$dynamicRef") ? "$dynamicRef" : "$recursiveRef";
  if (!s[key].is_string()) error(path, fmt::format("{} must be a string", key));
  std::string target = s[key].get<std::string>();
  if (std::string(key) != "$ref" && target.find('/') == std::string::npos) target = "#";  // "#meta": the root
  const json rest = without(s, {"$ref", "$dynamicRef", "$recursiveRef"});
  if (only_annotations(rest)) return ref_rule(target, path);
  const std::string text = s.dump();
  if (auto it = merged_.find(text); it != merged_.end()) return it->second;
  const json* t = resolve_json_pointer(root_, target);
  if (!t) {
    note(path, fmt::format("$ref '{}' is not a local reference and is not enforced", target));
    return visit(rest, path);
  }
  const std::string name = reserve_rule(path + "-ref");
  merged_[text] = name;
  std::vector<std::string> notes;
  const json merged = merge_schemas(*t, rest, notes);
  charge(path);
  for (const std::string& n : notes) note(path, n);
  const std::string body = visit(merged, path + "/$ref");
  define_rule(name, body.empty() ? "\"\\x00\" " + name : body);  // no base case: matches nothing
  return body.empty() ? "" : name;
}

std::string SchemaConverter::ref_rule(const std::string& target, const std::string& path) {
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  const json* t = resolve_json_pointer(root_, target);
  if (!t) {
    note(path, fmt::format("$ref '{}' is not a local reference and is not enforced", target));
    return "json-value";
  }
  // Named before its body is compiled, so a recursive definition refers to itself.
  const std::string name = reserve_rule("ref-" + target);
  refs_[target] = name;
  const std::string body = visit(*t, path + "/$ref");
  define_rule(name, body.empty() ? "\"\\x00\" " + name : body);  // no base case: matches nothing
  if (body.empty()) refs_[target] = "";
  return body.empty() ? "" : name;
}

std::string SchemaConverter::all_of(const json& s, const std::string& path) {
  if (!s["allOf"].is_array() || s["allOf"].empty()) error(path, "allOf must be a non-empty array");
  json merged = without(s, {"allOf"});
  std::vector<std::string> notes;
  for (const json& member : s["allOf"]) {
    if (!member.is_object() && !member.is_boolean()) error(path, "allOf must hold schemas");
    const json* m = &member;
    // A member that is only a $ref is merged by its content (chains followed a few steps).
    for (int hops = 0; hops < 8 && m->is_object() && m->contains("$ref") && only_annotations(without(*m, {"$ref"}));
         ++hops) {
      const json* t = (*m)["$ref"].is_string() ? resolve_json_pointer(root_, (*m)["$ref"].get<std::string>()) : nullptr;
      if (!t) break;
      m = t;
    }
    merged = merge_schemas(merged, *m, notes);
    charge(path);
  }
  for (const std::string& n : notes) note(path, n);
  return visit(merged, path);
}

std::string SchemaConverter::one_of(const json& s, const std::string& key, const std::string& path) {
  const json& alts = s[key];
  if (!alts.is_array() || alts.empty()) error(path, fmt::format("{} must be a non-empty array", key));
  const json base = without(s, {key.c_str()});
  const bool alone = only_annotations(base);
  if (key == "oneOf" && !provably_disjoint(alts))
    note(path, "oneOf is enforced as anyOf (its alternatives are not provably disjoint)");
  std::vector<std::string> bodies;
  std::vector<std::string> notes;
  for (size_t i = 0; i < alts.size(); ++i) {
    const std::string sub = fmt::format("{}/{}/{}", path, key, i);
    const std::string body = alone ? visit(alts[i], sub) : visit(merge_schemas(base, alts[i], notes), sub);
    if (!body.empty() && std::find(bodies.begin(), bodies.end(), body) == bodies.end()) bodies.push_back(body);
  }
  for (const std::string& n : notes) note(path, n);
  if (bodies.empty()) return "";
  return bodies.size() == 1 ? bodies[0] : new_rule(path + "-" + key, alternatives(bodies));
}

// Disjoint when every pair of alternatives differs in the JSON types they allow or in the const/enum values of a
// property both require.
bool SchemaConverter::provably_disjoint(const json& alts) {
  auto types = [](const json& a) -> std::set<std::string> {
    if (!a.is_object()) return {};
    if (a.contains("const")) return {json_type_of(a["const"])};
    std::set<std::string> t;
    if (a.contains("type") && a["type"].is_string()) t.insert(a["type"].get<std::string>());
    if (a.contains("type") && a["type"].is_array())
      for (const auto& x : a["type"])
        if (x.is_string()) t.insert(x.get<std::string>());
    if (t.count("number")) t.insert("integer");
    return t;
  };
  auto tag = [](const json& a, const std::string& prop) -> json {
    if (!a.is_object() || !a.contains("properties") || !a["properties"].contains(prop)) return nullptr;
    const json& p = a["properties"][prop];
    if (!p.is_object()) return nullptr;
    if (p.contains("const")) return json::array({p["const"]});
    return p.contains("enum") ? p["enum"] : json(nullptr);
  };
  for (size_t i = 0; i < alts.size(); ++i)
    for (size_t j = i + 1; j < alts.size(); ++j) {
      const std::set<std::string> ti = types(alts[i]), tj = types(alts[j]);
      bool disjoint = !ti.empty() && !tj.empty() &&
                      std::none_of(ti.begin(), ti.end(), [&](const std::string& t) { return tj.count(t) > 0; });
      if (!disjoint && alts[i].is_object() && alts[i].contains("required") && alts[i]["required"].is_array())
        for (const auto& r : alts[i]["required"]) {
          if (!r.is_string()) continue;
          const json a = tag(alts[i], r), b = tag(alts[j], r);
          const bool b_requires =
              alts[j].contains("required") && alts[j]["required"].is_array() &&
              std::find(alts[j]["required"].begin(), alts[j]["required"].end(), r) != alts[j]["required"].end();
          if (!a.is_array() || !b.is_array() || !b_requires) continue;
          disjoint |= std::none_of(a.begin(), a.end(),
                                   [&](const json& v) { return std::find(b.begin(), b.end(), v) != b.end(); });
        }
      if (!disjoint) return false;
    }
  return true;
}

std::string SchemaConverter::enumeration(const json& s, const std::string& path) {
  json values = json::array();
  if (s.contains("enum")) {
    if (!s["enum"].is_array()) error(path, "enum must be an array");
    values = s["enum"];
  }
  if (s.contains("const")) {
    const bool in_enum = !s.contains("enum") || std::find(values.begin(), values.end(), s["const"]) != values.end();
    values = in_enum ? json::array({s["const"]}) : json::array();
  }
  std::vector<std::string> types;
  if (s.contains("type")) types = types_of(s, path);
  std::vector<std::string> alts;
  std::set<std::string> seen;
  for (const json& v : values) {
    const std::string t = json_type_of(v);
    if (!types.empty() && std::find(types.begin(), types.end(), t) == types.end() &&
        !(t == "integer" && std::find(types.begin(), types.end(), "number") != types.end()))
      continue;
    std::string lit = gbnf_literal(js_text(v));
    charge(path);
    if (seen.insert(lit).second) alts.push_back(std::move(lit));
  }
  for (const auto& [k, v] : s.items())
    if (!is_annotation_keyword(k) && k != "enum" && k != "const" && k != "type" && k != "nullable")
      note(path, fmt::format("'{}' beside enum/const is not enforced", k));
  if (alts.empty()) return "";
  return alts.size() == 1 ? alts[0] : new_rule(path + "-enum", alternatives(alts));
}

// The types the schema allows: its "type" (and OpenAPI's nullable), else what its keywords imply; empty when it
// constrains no type.
std::vector<std::string> SchemaConverter::types_of(const json& s, const std::string& path) {
  static const std::set<std::string, std::less<>> kTypes = {"object",  "array",   "string", "number",
                                                            "integer", "boolean", "null"};
  std::vector<std::string> types;
  if (s.contains("type")) {
    const json& t = s["type"];
    if (!t.is_string() && !t.is_array()) error(path, "type must be a string or an array of strings");
    for (const auto& x : t.is_array() ? t : json::array({t})) {
      if (!x.is_string() || !kTypes.count(x.get<std::string>()))
        error(path,
              fmt::format("type {} is not one of object, array, string, number, integer, boolean, null", x.dump()));
      types.push_back(x.get<std::string>());
    }
    if (types.empty()) error(path, "type is an empty list");
  } else {
    auto any = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (any({"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
             "maxProperties", "dependentRequired", "unevaluatedProperties"}))
      types.push_back("object");
    else if (any({"items", "prefixItems", "minItems", "maxItems", "additionalItems"}))
      types.push_back("array");
    else if (any({"pattern", "minLength", "maxLength", "format"}))
      types.push_back("string");
    else if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      types.push_back("number");
  }
  if (!types.empty() && s.contains("nullable") && s["nullable"] == true &&
      std::find(types.begin(), types.end(), "null") == types.end())
    types.push_back("null");
  return types;
}

void SchemaConverter::note_unenforced(const json& s, const std::string& path) {
  for (const auto& [k, v] : s.items()) {
    if (is_annotation_keyword(k) || kEnforced.count(k)) continue;
    if (k == "multipleOf" && v.is_number() && v.get<double>() == 1) continue;  // enforced: it makes an integer
    note(path, fmt::format("'{}' is not enforced", k));
  }
}

std::string SchemaConverter::typed(const json& s, const std::string& path) {
  note_unenforced(s, path);
  const std::vector<std::string> types = types_of(s, path);
  if (types.empty()) return "json-value";
  std::vector<std::string> alts;
  for (const std::string& t : types) {
    std::string alt;
    if (t == "object")
      alt = object_schema(s, path);
    else if (t == "array")
      alt = array_schema(s, path);
    else if (t == "string")
      alt = string_schema(s, path);
    else if (t == "number" || t == "integer")
      alt = number_schema(s, path, t == "integer");
    else
      alt = t == "boolean" ? "json-boolean" : "json-null";
    if (!alt.empty()) alts.push_back(alt);
  }
  if (alts.empty()) return "";
  return alternatives(alts);
}

// minLength, maxItems, …: counts above kMaxRepetition are not enforced beyond it (a minimum is lowered to it, a
// maximum dropped), which keeps every valid instance.
int64_t SchemaConverter::count_keyword(const json& s, const char* key, const std::string& path, int64_t dflt,
                                       bool is_max) {
  if (!s.contains(key)) return dflt;
  const json& v = s[key];
  if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>()))
    error(path, fmt::format("{} must be a non-negative integer", key));
  if (v.get<double>() > kMaxRepetition) {
    note(path, fmt::format("{} above {} is not enforced", key, kMaxRepetition));
    return is_max ? -1 : static_cast<int64_t>(kMaxRepetition);
  }
  return static_cast<int64_t>(v.get<double>());
}

std::string SchemaConverter::string_schema(const json& s, const std::string& path) {
  const int64_t min = count_keyword(s, "minLength", path, 0, false);
  const int64_t max = count_keyword(s, "maxLength", path, -1, true);
  if (max >= 0 && max < min) return "";
  const bool lengths = min > 0 || max >= 0;
  if (s.contains("pattern") && s["pattern"].is_string()) {
    try {
      const PatternGrammar g = pattern_gbnf(s["pattern"].get<std::string>(), min, max);
      if (g.expr.empty()) return "";
      if (!g.lengths_enforced) note(path, "minLength/maxLength beside this pattern are not enforced");
      if (s.contains("format")) note(path, "format beside pattern is not enforced (the pattern is)");
      return new_rule(path + "-pattern", "\"\\\"\" " + g.expr + " \"\\\"\"");
    } catch (const Error& e) {
      std::string why = e.what();  // "regex: WHAT at offset N of pattern '…'": the pattern it names is rewritten
      why = why.substr(0, why.find(" at offset"));
      note(path, fmt::format("pattern '{}' is not enforced ({})", s["pattern"].get<std::string>(), why));
    }
  }
  if (s.contains("format") && s["format"].is_string()) {
    const std::string f = use_format(s["format"].get<std::string>());
    if (!f.empty()) {
      if (lengths) note(path, "minLength/maxLength beside format are not enforced");
      return new_rule(path + "-format", "\"\\\"\" " + f + " \"\\\"\"");
    }
    note(path, fmt::format("format '{}' is not enforced", s["format"].get<std::string>()));
  }
  if (!lengths) return "json-string";
  return new_rule(path + "-string", "\"\\\"\" json-char" +
                                        (max < 0 ? fmt::format("{{{},}}", min) : fmt::format("{{{},{}}}", min, max)) +
                                        " \"\\\"\"");
}

// integer / number with bounds (json_schema_numbers.h): draft 6+ numeric exclusive bounds, draft 4 booleans that
// make minimum/maximum exclusive; of two bounds on one side the tighter counts. multipleOf 1 makes an integer;
// other multipleOf values are not enforced.
std::string SchemaConverter::number_schema(const json& s, const std::string& path, bool integer) {
  if (s.contains("multipleOf")) {
    const json& m = s["multipleOf"];
    if (!m.is_number() || m.get<double>() <= 0) error(path, "multipleOf must be a number greater than 0");
    integer = integer || m.get<double>() == 1;
  }
  NumberRange r;
  auto side = [&](const char* key, const char* ex_key, std::optional<Decimal>& bound, bool& exclusive, bool lower) {
    auto value = [&](const json& v, const char* k) {
      if (!v.is_number()) error(path, fmt::format("{} must be a number", k));
      std::optional<Decimal> d = parse_decimal(v.dump());
      if (!d) error(path, fmt::format("{} {} has more than {} digits", k, v.dump(), kMaxBoundDigits));
      return *d;
    };
    if (s.contains(key)) bound = value(s[key], key);
    if (!s.contains(ex_key)) return;
    const json& e = s[ex_key];
    if (e.is_boolean()) {
      exclusive = bound && e.get<bool>();
      return;
    }
    const Decimal x = value(e, ex_key);
    const double xv = e.get<double>(), bv = s.contains(key) ? s[key].get<double>() : 0;
    if (!bound || (lower ? xv >= bv : xv <= bv)) bound = x, exclusive = true;
  };
  side("minimum", "exclusiveMinimum", r.lo, r.lo_exclusive, true);
  side("maximum", "exclusiveMaximum", r.hi, r.hi_exclusive, false);
  if (!r.lo && !r.hi) return integer ? "json-integer" : "json-number";
  const std::string body = integer ? integer_range_gbnf(r, 16) : number_range_gbnf(r, 16);
  if (body.empty()) return "";
  return new_rule(path + (integer ? "-integer" : "-number"), body);
}

}  // namespace kvik::structured
