#include "engine/structured/json_schema_merge.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace kvik::structured {

namespace {

using json = SchemaJson;

constexpr size_t kMaxCrossAlternatives = 64;

json all_of(const json& x, const json& y) {
  if (x == json(true) || x == y) return y;
  if (y == json(true)) return x;
  if (x == json(false) || y == json(false)) return false;
  return json{{"allOf", json::array({x, y})}};
}

std::vector<std::string> type_list(const json& t) {
  std::vector<std::string> out;
  if (t.is_string()) out.push_back(t.get<std::string>());
  if (t.is_array())
    for (const auto& x : t)
      if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

// The types allowed by both lists; "integer" is within "number". nullopt: not two lists.
std::optional<json> intersect_types(const json& a, const json& b) {
  const std::vector<std::string> ta = type_list(a), tb = type_list(b);
  if (ta.empty() || tb.empty()) return std::nullopt;
  json out = json::array();
  auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  for (const std::string& t : ta) {
    if (has(tb, t) || (t == "integer" && has(tb, "number")))
      out.push_back(t);
    else if (t == "number" && has(tb, "integer"))
      out.push_back("integer");
  }
  if (out.size() == 1) return out[0];
  return out;
}

json enum_values(const json& s) {
  if (s.contains("const")) return json::array({s["const"]});
  if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
  return nullptr;
}

bool is_min_key(const std::string& k) {
  return k == "minimum" || k == "minLength" || k == "minItems" || k == "minProperties" || k == "minContains";
}
bool is_max_key(const std::string& k) {
  return k == "maximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties" || k == "maxContains";
}

void merge_properties(json& out, const json& b, std::vector<std::string>& notes) {
  json& props = out["properties"];
  const bool a_closed = out.contains("additionalProperties") && out["additionalProperties"] != json(true);
  const bool b_closed = b.contains("additionalProperties") && b["additionalProperties"] != json(true);
  bool loosened = false;
  for (const auto& [k, v] : b["properties"].items()) {
    if (props.contains(k)) {
      props[k] = all_of(props[k], v);
    } else {
      props[k] = v;
      loosened |= a_closed;
    }
  }
  if (b_closed)
    for (const auto& [k, v] : props.items()) loosened |= !b["properties"].contains(k);
  if (loosened) notes.push_back("additionalProperties of one allOf member is not applied to another's properties");
}

void merge_tuples(json& out, const std::string& key, const json& b) {
  json& mine = out[key];
  if (!mine.is_array() || !b[key].is_array()) return;
  for (size_t i = 0; i < b[key].size(); ++i) {
    if (i < mine.size())
      mine[i] = all_of(mine[i], b[key][i]);
    else
      mine.push_back(b[key][i]);
  }
}

void merge_alternatives(json& out, const std::string& key, const json& b, std::vector<std::string>& notes) {
  const json& xa = out[key];
  const json& xb = b[key];
  if (!xa.is_array() || !xb.is_array() || xa.size() * xb.size() > kMaxCrossAlternatives) {
    notes.push_back(fmt::format("the {} of a second allOf member is not enforced", key));
    return;
  }
  json cross = json::array();
  for (const auto& x : xa)
    for (const auto& y : xb) cross.push_back(all_of(x, y));
  out[key] = std::move(cross);
}

// Both a and b hold `k`: out[k] becomes the merge of the two.
void merge_key(json& out, const std::string& k, const json& b, std::vector<std::string>& notes) {
  const json& vb = b[k];
  json& va = out[k];
  if (k == "properties" && va.is_object() && vb.is_object()) {
    merge_properties(out, b, notes);
  } else if (k == "required" && va.is_array() && vb.is_array()) {
    for (const auto& r : vb)
      if (std::find(va.begin(), va.end(), r) == va.end()) va.push_back(r);
  } else if ((k == "patternProperties" || k == "dependentRequired" || k == "$defs" || k == "definitions") &&
             va.is_object() && vb.is_object()) {
    for (const auto& [p, v] : vb.items()) {
      if (!va.contains(p))
        va[p] = v;
      else if (k == "patternProperties")
        va[p] = all_of(va[p], v);
      else if (k == "dependentRequired" && va[p].is_array() && v.is_array())
        for (const auto& r : v)
          if (std::find(va[p].begin(), va[p].end(), r) == va[p].end()) va[p].push_back(r);
    }
  } else if (k == "additionalProperties" || k == "propertyNames" || k == "additionalItems" ||
             k == "unevaluatedProperties" || k == "unevaluatedItems" || (k == "items" && !va.is_array())) {
    va = all_of(va, vb);
  } else if (k == "prefixItems" || k == "items") {
    merge_tuples(out, k, b);
  } else if (is_min_key(k) && va.is_number() && vb.is_number()) {
    if (vb.get<double>() > va.get<double>()) va = vb;
  } else if (is_max_key(k) && va.is_number() && vb.is_number()) {
    if (vb.get<double>() < va.get<double>()) va = vb;
  } else if ((k == "exclusiveMinimum" || k == "exclusiveMaximum") && va.is_number() && vb.is_number()) {
    if ((k == "exclusiveMinimum") == (vb.get<double>() > va.get<double>())) va = vb;
  } else if (k == "anyOf" || k == "oneOf") {
    merge_alternatives(out, k, b, notes);
  } else if (k == "allOf" && va.is_array() && vb.is_array()) {
    for (const auto& x : vb) va.push_back(x);
  } else if (k == "$ref") {
    out["allOf"] = out.value("allOf", json::array());
    out["allOf"].push_back(json{{"$ref", vb}});
  } else if (k == "nullable") {
    va = va == json(true) && vb == json(true);
  } else if (va != vb && (k == "pattern" || k == "format" || k == "multipleOf" || k == "uniqueItems")) {
    notes.push_back(fmt::format("the {} of a second allOf member is not enforced", k));
  }
}

std::string decode_pointer_token(const std::string& t) {
  std::string pct;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '%' && i + 2 < t.size() && std::isxdigit(static_cast<unsigned char>(t[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(t[i + 2]))) {
      pct += static_cast<char>(std::stoi(t.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      pct += t[i];
    }
  }
  std::string out;
  for (size_t i = 0; i < pct.size(); ++i) {
    if (pct[i] == '~' && i + 1 < pct.size() && (pct[i + 1] == '0' || pct[i + 1] == '1')) {
      out += pct[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += pct[i];
    }
  }
  return out;
}

const json* find_anchor(const json& s, const std::string& name, int depth) {
  if (depth > 64) return nullptr;
  if (s.is_object()) {
    if (s.contains("$anchor") && s["$anchor"] == name) return &s;
    for (const auto& [k, v] : s.items())
      if (const json* f = find_anchor(v, name, depth + 1)) return f;
  } else if (s.is_array()) {
    for (const auto& v : s)
      if (const json* f = find_anchor(v, name, depth + 1)) return f;
  }
  return nullptr;
}

}  // namespace

bool is_annotation_keyword(std::string_view key) {
  static const std::set<std::string, std::less<>> kAnnotations = {
      "title",          "description", "default",       "examples",     "example", "$schema",     "$id",
      "$comment",       "deprecated",  "readOnly",      "writeOnly",    "$defs",   "definitions", "$anchor",
      "$dynamicAnchor", "$vocabulary", "discriminator", "externalDocs", "xml",     "strict",      "id"};
  return kAnnotations.count(key) > 0 || key.substr(0, 2) == "x-";
}

bool only_annotations(const json& s) {
  if (!s.is_object()) return false;
  for (const auto& [k, v] : s.items())
    if (!is_annotation_keyword(k)) return false;
  return true;
}

json merge_schemas(const json& a, const json& b, std::vector<std::string>& notes) {
  if (a == json(false) || b == json(false)) return false;
  if (a == json(true) || !a.is_object()) return b;
  if (b == json(true) || !b.is_object()) return a;
  json out = a;
  for (const auto& [k, vb] : b.items()) {
    if (is_annotation_keyword(k) && k != "$defs" && k != "definitions") continue;
    if (!out.contains(k)) {
      if (k == "properties" && out.contains("additionalProperties") && out["additionalProperties"] != json(true))
        notes.push_back("additionalProperties of one allOf member is not applied to another's properties");
      out[k] = vb;
      continue;
    }
    if (k == "type") {
      std::optional<json> t = intersect_types(out[k], vb);
      if (t && t->is_array() && t->empty()) return false;
      if (t) out[k] = *t;
      continue;
    }
    if (k != "enum" && k != "const") merge_key(out, k, b, notes);
  }
  const json ea = enum_values(a), eb = enum_values(b);
  if (!ea.is_null() || !eb.is_null()) {
    json values = json::array();
    for (const auto& v : ea.is_null() ? eb : ea)
      if (eb.is_null() || ea.is_null() || std::find(eb.begin(), eb.end(), v) != eb.end()) values.push_back(v);
    if (values.empty()) return false;
    out.erase("const");
    out["enum"] = std::move(values);
  }
  return out;
}

const json* resolve_json_pointer(const json& root, const std::string& ref) {
  const size_t hash = ref.find('#');
  if (hash == std::string::npos) return nullptr;
  if (hash > 0) {  // BASE#...: local only when BASE is the root's $id
    const std::string base = ref.substr(0, hash);
    const std::string id =
        root.is_object() && root.contains("$id") && root["$id"].is_string() ? root["$id"].get<std::string>() : "";
    if (id.empty() || (id != base && id.substr(0, id.find('#')) != base)) return nullptr;
  }
  const std::string frag = ref.substr(hash + 1);
  if (frag.empty()) return &root;
  if (frag[0] != '/') return find_anchor(root, decode_pointer_token(frag), 0);
  const json* cur = &root;
  size_t pos = 1;
  while (true) {
    const size_t slash = frag.find('/', pos);
    const std::string token =
        decode_pointer_token(frag.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos));
    if (cur->is_object()) {
      if (!cur->contains(token)) return nullptr;
      cur = &(*cur)[token];
    } else if (cur->is_array()) {
      if (token.empty() || token.find_first_not_of("0123456789") != std::string::npos || token.size() > 9)
        return nullptr;
      const size_t i = std::stoul(token);
      if (i >= cur->size()) return nullptr;
      cur = &(*cur)[i];
    } else {
      return nullptr;
    }
    if (slash == std::string::npos) return cur;
    pos = slash + 1;
  }
}

}  // namespace kvik::structured
