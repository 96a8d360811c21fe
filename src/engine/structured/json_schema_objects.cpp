// Arrays and objects of the JSON Schema compiler.
//
// An object is written as its declared properties in the schema's order (each required one present, each optional
// one present or not), then any extra properties (patternProperties, additionalProperties). minProperties /
// maxProperties and dependentRequired need to know what was written: the grammar is a small automaton whose state is
// (next declared property, properties written so far, properties now required by a dependency, properties now
// forbidden because one they require was left out), one rule per reachable state. Past kMaxObjectStates states the
// counts and dependencies are dropped (noted as not enforced) and the plain order remains.
#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema_converter.h"
#include "engine/structured/json_schema_pattern.h"

namespace kvik::structured {

namespace {

using json = SchemaJson;

constexpr size_t kMaxObjectStates = 2048;
// Objects with counts or dependencies and more properties than this are built without them: the state machine
// recurses once per property.
constexpr size_t kMaxStatefulProperties = 256;

std::string repeat_suffix(int64_t min, int64_t max) {  // max < 0: unbounded
  if (max < 0) return fmt::format("{{{},}}", min);
  return fmt::format("{{{},{}}}", min, max);
}

// JSON strings other than the given names (llama.cpp's _not_strings): a trie walk that leaves the trie at some
// character or ends before a name ends. Only for names of printable ASCII without '"' and '\' (else nullopt).
std::optional<std::string> string_except(const std::vector<std::string>& names) {
  struct Node {
    std::map<char, Node> next;
    bool end = false;
  } root;
  for (const std::string& n : names) {
    if (n.size() > 256) return std::nullopt;  // the walk recurses once per character
    for (char c : n)
      if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') return std::nullopt;
    Node* cur = &root;
    for (char c : n) cur = &cur->next[c];
    cur->end = true;
  }
  std::function<std::string(const Node&)> walk = [&](const Node& n) {
    std::string cls = "[^\"\\\\\\x00-\\x1F";
    std::vector<std::string> alts;
    for (const auto& [c, child] : n.next) {
      const std::string lit =
          std::isalnum(static_cast<unsigned char>(c)) ? std::string(1, c) : fmt::format("\\x{:02X}", c);
      cls += lit;
      alts.push_back(gbnf_literal(std::string(1, c)) + " " + walk(child));
    }
    alts.push_back("(" + cls + "] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})) json-char*");
    std::string body;
    for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + a;
    return "(" + body + ")" + (n.end ? "" : "?");
  };
  return "\"\\\"\" " + walk(root) + " \"\\\"\"";
}

}  // namespace

struct SchemaConverter::ObjectPlan {
  std::vector<std::string> names;
  std::vector<std::string> kv;  // "\"name\" ws \":\" ws VALUE ws"; "" when the value allows nothing
  std::vector<bool> required;
  std::vector<std::vector<int>> needs;      // needs[i]: the properties after i that must follow when i is written
  std::vector<std::vector<int>> needed_by;  // needed_by[j]: the properties after j that j's absence forbids
  std::string extra_kv;                     // one extra property; "" when none is allowed
  int64_t min_props = 0, max_props = -1;
  bool counting = false;
};

std::string SchemaConverter::object_schema(const json& s, const std::string& path) {
  const ObjectPlan plan = plan_object(s, path);
  if (plan.names.empty() && plan.extra_kv == "json-string ws \":\" ws json-value ws" && !plan.counting)
    return "json-object";
  return build_object(plan, path);
}

SchemaConverter::ObjectPlan SchemaConverter::plan_object(const json& s, const std::string& path) {
  ObjectPlan plan;
  plan_declared(s, path, plan);
  plan_extras(s, path, plan);
  plan_dependencies(s, path, plan);
  plan.min_props = count_keyword(s, "minProperties", path, 0, false);
  plan.max_props = count_keyword(s, "maxProperties", path, -1, true);
  int64_t required = 0;
  for (bool r : plan.required) required += r;
  const bool max_binds =
      plan.max_props >= 0 && (!plan.extra_kv.empty() || plan.max_props < static_cast<int64_t>(plan.names.size()));
  plan.counting = plan.min_props > required || max_binds;
  return plan;
}

// properties (with the values of matching patternProperties merged in), then required names not declared, which
// take the additionalProperties schema (true when absent).
void SchemaConverter::plan_declared(const json& s, const std::string& path, ObjectPlan& plan) {
  static const json kNone = json::object();
  if (s.contains("properties") && !s["properties"].is_object()) error(path, "properties must be an object");
  if (s.contains("required") && !s["required"].is_array()) error(path, "required must be an array");
  if (s.contains("patternProperties") && !s["patternProperties"].is_object())
    error(path, "patternProperties must be an object");
  const json& props = s.contains("properties") ? s["properties"] : kNone;
  const json& patterns = s.contains("patternProperties") ? s["patternProperties"] : kNone;
  const json undeclared_value = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
  // Declared properties in order, then required names not declared (found through a set: no quadratic lookups).
  std::vector<std::pair<std::string, const json*>> list;
  std::set<std::string> declared, required;
  for (const auto& [name, sub] : props.items()) {
    list.emplace_back(name, &sub);
    declared.insert(name);
  }
  if (s.contains("required"))
    for (const auto& r : s["required"]) {
      if (!r.is_string()) error(path, "required must list strings");
      required.insert(r.get<std::string>());
      if (declared.insert(r.get<std::string>()).second) list.emplace_back(r.get<std::string>(), &undeclared_value);
    }
  std::vector<std::string> notes;
  std::vector<std::pair<PatternMatcher, const json*>> matchers;
  if (!list.empty())
    for (const auto& [p, ps] : patterns.items()) {
      charge(path, 10);
      matchers.emplace_back(PatternMatcher(p), &ps);
    }
  for (const auto& [name, sub] : list) {
    std::optional<json> merged;
    for (auto& [m, ps] : matchers) {
      charge(path);
      if (m.matches(name)) merged = merge_schemas(merged ? *merged : *sub, *ps, notes);
    }
    const std::string v = visit(merged ? *merged : *sub, path + "/properties/" + name);
    plan.names.push_back(name);
    plan.kv.push_back(v.empty() ? "" : gbnf_literal(json(name).dump()) + " ws \":\" ws " + v + " ws");
    plan.required.push_back(required.count(name) > 0);
  }
  for (const std::string& n : notes) note(path, n);
}

// The extra properties: one alternative per patternProperties entry, and additionalProperties (absent: none when
// properties or patternProperties are given, any otherwise) with keys from propertyNames, other than the declared
// names. A key matching a pattern may also take the additional schema (not enforced: patterns are not subtracted).
void SchemaConverter::plan_extras(const json& s, const std::string& path, ObjectPlan& plan) {
  std::vector<std::string> alts;
  static const json kNone = json::object();
  const json& patterns = s.contains("patternProperties") ? s["patternProperties"] : kNone;
  for (const auto& [p, ps] : patterns.items()) {
    const std::string v = visit(ps, path + "/patternProperties/" + p);
    if (v.empty()) continue;
    try {
      const PatternGrammar g = pattern_gbnf(p, 0, -1);
      if (!g.expr.empty()) alts.push_back("\"\\\"\" " + g.expr + " \"\\\"\" ws \":\" ws " + v + " ws");
    } catch (const Error& e) {
      note(path, fmt::format("patternProperties '{}' is not enforced ({})", p, e.what()));
      alts.push_back("json-string ws \":\" ws " + v + " ws");
    }
  }
  json additional = s.contains("additionalProperties") ? s["additionalProperties"]
                    : s.contains("unevaluatedProperties")
                        ? s["unevaluatedProperties"]
                        : json(!s.contains("properties") && !s.contains("patternProperties"));
  const std::string value = visit(additional, path + "/additionalProperties");
  if (!value.empty()) {
    const std::string key = extra_key(s, path, plan);
    if (!key.empty()) alts.push_back(key + " ws \":\" ws " + value + " ws");
  }
  if (alts.size() == 1 && alts[0] == "json-string ws \":\" ws json-value ws")
    plan.extra_kv = alts[0];
  else if (!alts.empty())
    plan.extra_kv = new_rule(path + "-extra", [&] {
      std::string b;
      for (const std::string& a : alts) b += (b.empty() ? "" : " | ") + a;
      return b;
    }());
}

std::string SchemaConverter::extra_key(const json& s, const std::string& path, const ObjectPlan& plan) {
  if (s.contains("propertyNames")) {
    const json names = merge_schemas(s["propertyNames"], json{{"type", "string"}}, not_enforced_);
    return visit(names, path + "/propertyNames");
  }
  std::vector<std::string> declared;
  for (size_t i = 0; i < plan.names.size(); ++i) declared.push_back(plan.names[i]);
  if (declared.empty()) return "json-string";
  if (std::optional<std::string> k = string_except(declared)) return new_rule(path + "-key", *k);
  note(path, "extra property names are not kept apart from the declared ones");
  return "json-string";
}

// dependentRequired (and draft 7's array-valued dependencies): needs / needed_by between declared properties.
void SchemaConverter::plan_dependencies(const json& s, const std::string& path, ObjectPlan& plan) {
  plan.needs.assign(plan.names.size(), {});
  plan.needed_by.assign(plan.names.size(), {});
  auto index = [&](const std::string& n) -> int {
    const auto it = std::find(plan.names.begin(), plan.names.end(), n);
    return it == plan.names.end() ? -1 : static_cast<int>(it - plan.names.begin());
  };
  for (const char* key : {"dependentRequired", "dependencies"}) {
    if (!s.contains(key) || !s[key].is_object()) continue;
    for (const auto& [a, list] : s[key].items()) {
      if (!list.is_array()) {
        note(path, fmt::format("{} '{}' (a schema) is not enforced", key, a));
        continue;
      }
      const int ia = index(a);
      for (const auto& b : list) {
        const int ib = b.is_string() ? index(b.get<std::string>()) : -1;
        if (ia < 0 || ib < 0) {
          note(path, fmt::format("{} '{}' on a property not declared in properties is not enforced", key, a));
          continue;
        }
        if (ib > ia) plan.needs[static_cast<size_t>(ia)].push_back(ib);
        if (ib < ia) plan.needed_by[static_cast<size_t>(ib)].push_back(ia);
      }
    }
  }
}

std::string SchemaConverter::build_object(const ObjectPlan& plan, const std::string& path) {
  bool constrained = plan.counting;
  for (const auto& n : plan.needs) constrained |= !n.empty();
  for (const auto& n : plan.needed_by) constrained |= !n.empty();
  if (constrained && plan.names.size() <= kMaxStatefulProperties) {
    std::map<std::string, std::string> memo;
    try {
      const std::string body = object_state(plan, path, 0, 0, {}, {}, memo);
      return body.empty() ? "" : new_rule(path + "-object", "\"{\" ws " + body + " \"}\"");
    } catch (const std::length_error&) {
    }
  }
  if (constrained) note(path, "minProperties/maxProperties/dependentRequired are not enforced (too many combinations)");
  return plain_object(plan, path);
}

// Without counts or dependencies: rest[i] (something was written before i) and first[i] (nothing yet), built
// from the last property back, so no recursion grows with the number of properties.
std::string SchemaConverter::plain_object(const ObjectPlan& plan, const std::string& path) {
  ObjectPlan open = plan;
  open.counting = false;
  const size_t n = plan.names.size();
  std::string rest = object_extras(open, path, 1), first = object_extras(open, path, 0);
  for (size_t i = n; i-- > 0;) {
    const std::string& kv = plan.kv[i];
    auto then = [](const std::string& head, const std::string& next) {
      return next == "\"\"" ? head : head + " " + next;
    };
    std::string r, f;
    if (!kv.empty() && !rest.empty()) r = then("\",\" ws " + kv, rest), f = then(kv, rest);
    if (!plan.required[i]) {
      if (!rest.empty()) r = r.empty() ? rest : r + " | " + rest;
      if (!first.empty()) f = f.empty() ? first : f + " | " + first;
    }
    const std::string hint = path + "-" + plan.names[i];
    rest = r.empty() || r == "\"\"" ? r : new_rule(hint + "-rest", r);
    first = f.empty() || f == "\"\"" ? f : new_rule(hint + "-first", f);
  }
  return first.empty() ? "" : new_rule(path + "-object", "\"{\" ws " + first + " \"}\"");
}

// The rest of an object from declared property i on, `count` properties written (only whether any, when not
// counting); `pending` must still come, `forbidden` must not. "" when no object can be completed from here.
std::string SchemaConverter::object_state(const ObjectPlan& plan, const std::string& path, size_t i, int64_t count,
                                          std::vector<int> pending, std::vector<int> forbidden,
                                          std::map<std::string, std::string>& memo) {
  const int64_t cap = plan.counting ? std::max<int64_t>(plan.min_props, plan.max_props + 1) : 1;
  count = std::min(count, cap);
  const std::string key = fmt::format("{}|{}|{}|{}", i, count, fmt::join(pending, ","), fmt::join(forbidden, ","));
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  if (memo.size() >= kMaxObjectStates) throw std::length_error("object states");
  charge(path);
  memo[key] = "";
  if (i == plan.names.size()) return memo[key] = object_extras(plan, path, count);
  const int me = static_cast<int>(i);
  auto drop_me = [&](std::vector<int> v) {
    v.erase(std::remove(v.begin(), v.end(), me), v.end());
    return v;
  };
  const bool is_pending = std::find(pending.begin(), pending.end(), me) != pending.end();
  const bool is_forbidden = std::find(forbidden.begin(), forbidden.end(), me) != forbidden.end();
  std::vector<std::string> alts;
  if (!plan.kv[i].empty() && !is_forbidden) {
    std::vector<int> p = drop_me(pending);
    for (int j : plan.needs[i])
      if (std::find(p.begin(), p.end(), j) == p.end()) p.push_back(j);
    std::sort(p.begin(), p.end());
    const std::string next = object_state(plan, path, i + 1, count + 1, p, drop_me(forbidden), memo);
    if (!next.empty()) alts.push_back((count > 0 ? "\",\" ws " : "") + plan.kv[i] + (next == "\"\"" ? "" : " " + next));
  }
  if (!plan.required[i] && !is_pending) {
    std::vector<int> f = drop_me(forbidden);
    for (int j : plan.needed_by[i])
      if (std::find(f.begin(), f.end(), j) == f.end()) f.push_back(j);
    std::sort(f.begin(), f.end());
    const std::string next = object_state(plan, path, i + 1, count, drop_me(pending), f, memo);
    if (!next.empty()) alts.push_back(next);
  }
  if (alts.empty()) return memo[key] = "";
  std::string body;
  for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + a;
  return memo[key] = alts.size() == 1 && alts[0] == "\"\"" ? "\"\"" : new_rule(path + "-" + plan.names[i], body);
}

// The extra properties after the declared ones, `count` written so far.
std::string SchemaConverter::object_extras(const ObjectPlan& plan, const std::string& path, int64_t count) {
  const int64_t lo = plan.counting ? std::max<int64_t>(0, plan.min_props - count) : 0;
  const int64_t hi = plan.counting && plan.max_props >= 0 ? plan.max_props - count : -1;
  if (plan.counting && plan.max_props >= 0 && hi < 0) return "";
  if (plan.extra_kv.empty() || hi == 0) return lo > 0 ? "" : "\"\"";
  const std::string more = "(\",\" ws " + plan.extra_kv + ")";
  if (count > 0) return new_rule(path + "-extras", more + repeat_suffix(lo, hi));
  const std::string first =
      plan.extra_kv + " " + more + repeat_suffix(std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1);
  return new_rule(path + "-extras", lo > 0 ? first : "(" + first + ")?");
}

// Arrays: prefixItems (or draft 4's items array) position by position, then items (additionalItems after a tuple
// `items`; absent = any value) for the rest, between minItems and maxItems.
std::string SchemaConverter::array_schema(const json& s, const std::string& path) {
  const bool tuple_items = s.contains("items") && s["items"].is_array();
  const json prefix = s.contains("prefixItems") ? s["prefixItems"] : tuple_items ? s["items"] : json::array();
  if (!prefix.is_array()) error(path, "prefixItems must be an array");
  const json rest = s.contains("prefixItems") ? s.value("items", json(true))
                    : tuple_items             ? s.value("additionalItems", json(true))
                                              : s.value("items", json(true));
  const int64_t min = count_keyword(s, "minItems", path, 0, false);
  const int64_t max = count_keyword(s, "maxItems", path, -1, true);
  if (max >= 0 && max < min) return "";
  std::vector<std::string> items;
  for (size_t i = 0; i < prefix.size(); ++i)
    items.push_back(visit(prefix[i], fmt::format("{}/prefixItems/{}", path, i)));
  const std::string rest_item = visit(rest, path + "/items");
  // tail(i): the array from position i on, i items written.
  std::string tail;  // after the prefix
  const int64_t k = static_cast<int64_t>(items.size());
  {
    const int64_t lo = std::max<int64_t>(0, min - k), hi = max < 0 ? -1 : std::max<int64_t>(0, max - k);
    if (rest_item.empty() || hi == 0) {
      tail = lo > 0 ? "" : "\"\"";
    } else if (k > 0) {
      tail = "(\",\" ws " + rest_item + " ws)" + repeat_suffix(lo, hi);
    } else {
      const std::string list = rest_item + " ws (\",\" ws " + rest_item + " ws)" +
                               repeat_suffix(std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1);
      tail = lo > 0 ? list : "(" + list + ")?";
    }
  }
  for (int64_t i = k - 1; i >= 0; --i) {
    // Position i: stop here (when i items are enough) or write item i and go on.
    std::vector<std::string> alts;
    if (i >= min) alts.push_back("\"\"");
    if (!items[static_cast<size_t>(i)].empty() && !tail.empty() && (max < 0 || i < max))
      alts.push_back((i > 0 ? "\",\" ws " : "") + items[static_cast<size_t>(i)] + " ws " + tail);
    if (alts.empty()) {
      tail = "";
      continue;
    }
    tail = new_rule(fmt::format("{}-item{}", path, i), alts.size() == 1 ? alts[0] : alts[0] + " | " + alts[1]);
  }
  if (tail.empty()) return "";
  return new_rule(path + "-array", "\"[\" ws " + tail + " \"]\"");
}

}  // namespace kvik::structured
