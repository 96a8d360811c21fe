// The filters (`value | name(args)`), one function each, found by name in one table.
#include <cmath>

#include "chat/jinja_renderer.h"
#include "chat/jinja_text.h"

namespace kvik::jinja {

namespace {

using K = Value::Kind;

// Text filters --------------------------------------------------------------------------------------------

Value trim(Renderer& r, const FilterCall& c) {
  return Value::string(strip_chars(r.text(c.value), c.arg(0, "chars"), true, true));
}
Value upper(Renderer& r, const FilterCall& c) { return Value::string(ascii_upper(r.text(c.value))); }
Value lower(Renderer& r, const FilterCall& c) { return Value::string(ascii_lower(r.text(c.value))); }
Value string(Renderer& r, const FilterCall& c) {
  return c.value.is_string() ? c.value : Value::string(r.text(c.value));
}
Value capitalize(Renderer& r, const FilterCall& c) { return Value::string(title_case(r.text(c.value), false)); }
Value title(Renderer& r, const FilterCall& c) { return Value::string(title_case(r.text(c.value), true)); }

Value replace(Renderer& r, const FilterCall& c) {
  const Value* from = c.arg(0, "old");
  const Value* to = c.arg(1, "new");
  if (!from || !to || !from->is_string() || !to->is_string()) Renderer::error(c.at, "replace needs two strings");
  const size_t max = r.limits().max_output_bytes;
  auto out = replace_all(r.text(c.value), from->str(), to->str(), max);
  if (!out) Renderer::error(c.at, fmt::format("replace makes a string longer than {} bytes", max));
  return Value::string(std::move(*out));
}

Value tojson(Renderer& r, const FilterCall& c) {
  const Value* indent = c.arg(0, "indent");
  const int64_t width = indent ? whole(*indent).value_or(0) : 0;
  if (width < 0 || width > 64) Renderer::error(c.at, "tojson: indent must be between 0 and 64");
  return Value::string(to_json(c.value, static_cast<int>(width), r.limits().max_output_bytes));
}

Value indent(Renderer& r, const FilterCall& c) {
  const Value* width = c.arg(0, "width");
  const Value* first = c.arg(1, "first");
  const int64_t w = width ? whole(*width).value_or(4) : 4;
  const size_t max = r.limits().max_output_bytes;
  if (w < 0 || static_cast<uint64_t>(w) > max) Renderer::error(c.at, "indent width out of range");
  const std::string pad(static_cast<size_t>(w), ' ');
  std::string s = r.text(c.value), out = first && first->truthy() ? pad : "";
  for (size_t k = 0; k < s.size(); ++k) {
    out += s[k];
    if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') {
      out += pad;
      if (out.size() > max) Renderer::error(c.at, fmt::format("indent makes a string longer than {} bytes", max));
    }
  }
  return Value::string(out);
}

// Value filters -------------------------------------------------------------------------------------------

Value length(Renderer&, const FilterCall& c) {
  const Value& v = c.value;
  if (v.is_string()) return Value::integer(utf8_length(v.str()));
  if (v.is_array()) return Value::integer(static_cast<int64_t>(v.a->size()));
  if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.o->size()));
  Renderer::error(c.at, fmt::format("length of a {}", v.type_name()));
}

Value default_value(Renderer&, const FilterCall& c) {
  const Value* dflt = c.arg(0, "default_value");
  const Value* boolean = c.arg(1, "boolean");
  const bool use = c.value.is_undefined() || (boolean && boolean->truthy() && !c.value.truthy());
  return use ? (dflt ? *dflt : Value::string("")) : c.value;
}

Value to_int(Renderer&, const FilterCall& c) {
  const Value& v = c.value;
  if (v.kind == K::kInt) return v;
  if (v.is_number()) {
    const double d = std::trunc(v.as_double());
    if (!(std::fabs(d) < 9.2e18)) Renderer::error(c.at, "int() of a float out of range");
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    try {
      return Value::integer(std::stoll(v.str()));
    } catch (const std::exception&) {
    }
  }
  return Value::integer(0);
}

Value to_float(Renderer&, const FilterCall& c) {
  const Value& v = c.value;
  return Value::number(v.is_number() ? v.as_double() : v.is_string() ? std::atof(v.str().c_str()) : 0.0);
}

Value abs(Renderer&, const FilterCall& c) {
  const Value& v = c.value;
  if (!v.is_number()) Renderer::error(c.at, "abs of a non-number");
  if (v.kind == K::kInt && v.i == INT64_MIN) Renderer::error(c.at, "integer overflow in abs");
  return v.kind == K::kInt ? Value::integer(v.i < 0 ? -v.i : v.i) : Value::number(std::fabs(v.f));
}

Value items(Renderer& r, const FilterCall& c) {
  if (c.value.kind != K::kObject) Renderer::error(c.at, fmt::format("items of a {}", c.value.type_name()));
  return r.invoke(c.at, Renderer::dict_method(c.value, "items"), {});
}

// List filters --------------------------------------------------------------------------------------------

// What a list filter works on: a list's items, a string's bytes, a dict's keys; nothing for none/undefined.
Array items_of(Renderer& r, const FilterCall& c) {
  const Value& v = c.value;
  Array out;
  if (v.is_array()) {
    r.charge(c.at, v);
    out = *v.a;
  } else if (v.is_string()) {
    for (char ch : v.str()) {
      r.count_iteration(c.at);
      out.push_back(Value::string(std::string(1, ch)));
    }
  } else if (v.kind == K::kObject) {
    r.charge(c.at, v);
    for (const auto& [k, x] : *v.o) out.push_back(Value::string(k));
  } else if (!v.is_undefined() && !v.is_none()) {
    Renderer::error(c.at, fmt::format("filter '{}' on a {}", c.name, v.type_name()));
  }
  return out;
}

Value list(Renderer& r, const FilterCall& c) { return Value::array(items_of(r, c)); }
Value first(Renderer& r, const FilterCall& c) {
  const Array a = items_of(r, c);
  return a.empty() ? Value() : a.front();
}
Value last(Renderer& r, const FilterCall& c) {
  const Array a = items_of(r, c);
  return a.empty() ? Value() : a.back();
}
Value reverse(Renderer& r, const FilterCall& c) {
  const Array a = items_of(r, c);
  return Value::array(Array(a.rbegin(), a.rend()));
}

Value join(Renderer& r, const FilterCall& c) {
  const Array a = items_of(r, c);
  const Value* sep = c.arg(0, "d");
  return r.join(c.at, a, sep ? r.text(*sep) : std::string(), c.arg(1, "attribute"));
}

Value unique(Renderer& r, const FilterCall& c) {
  Array out;
  for (const Value& x : items_of(r, c)) {
    bool seen = false;
    for (const Value& y : out) {
      r.count_iteration(c.at);  // quadratic: each comparison counts
      if ((seen = r.same(x, y))) break;
    }
    if (!seen) out.push_back(x);
  }
  return Value::array(std::move(out));
}

Value sum(Renderer& r, const FilterCall& c) {
  Value total = Value::integer(0);
  for (const Value& x : items_of(r, c)) {
    if (!x.is_number()) Renderer::error(c.at, "sum of a non-number");
    if (total.kind == K::kInt && x.kind == K::kInt) {
      const std::optional<int64_t> s = int_op("+", total.i, x.i);
      if (!s) Renderer::error(c.at, "integer overflow in sum");
      total = Value::integer(*s);
    } else {
      total = Value::number(total.as_double() + x.as_double());
    }
  }
  return total;
}

// selectattr(attr, test, arg) / rejectattr: the items whose attribute passes (fails) the test, truthiness
// without a test; select(test, arg) / reject: the same on the items themselves. Tests from jinja_tests.cpp.
Value filter_by_test(Renderer& r, const FilterCall& c, bool by_attribute, bool keep) {
  const Value* attr = by_attribute ? c.arg(0, nullptr) : nullptr;
  if (by_attribute && (!attr || !attr->is_string()))
    Renderer::error(c.at, fmt::format("{} needs an attribute name", c.name));
  const size_t t = by_attribute ? 1 : 0;
  const Value* test_name = c.arg(t, nullptr);
  const Value* test_arg = c.arg(t + 1, nullptr);
  const std::string name = test_name ? r.text(*test_name) : std::string();
  Array out;
  for (const Value& x : items_of(r, c)) {
    if (test_name && !find_test(name)) Renderer::error(c.at, fmt::format("{}: unknown test '{}'", c.name, name));
    const Value* field = by_attribute ? (x.is_mapping() ? x.get(attr->str()) : nullptr) : &x;
    const Value v = field ? *field : Value();
    const bool ok = test_name ? apply_test(r, c.at, name, v, test_arg) : v.truthy();
    if (ok == keep) out.push_back(x);
  }
  return Value::array(std::move(out));
}
Value selectattr(Renderer& r, const FilterCall& c) { return filter_by_test(r, c, true, true); }
Value rejectattr(Renderer& r, const FilterCall& c) { return filter_by_test(r, c, true, false); }
Value select(Renderer& r, const FilterCall& c) { return filter_by_test(r, c, false, true); }
Value reject(Renderer& r, const FilterCall& c) { return filter_by_test(r, c, false, false); }

// map(attribute='x', default=d) or map('filter'): a one-argument filter applied to every item.
Value map(Renderer& r, const FilterCall& c) {
  const Array a = items_of(r, c);
  Array out;
  if (const Value* attr = c.args.kw("attribute")) {
    const Value* dflt = c.args.kw("default");
    for (const Value& x : a) {
      Value field = r.attribute(c.at, x, r.text(*attr));
      out.push_back(field.is_undefined() && dflt ? *dflt : field);
    }
  } else if (!c.args.positional.empty() && c.args.positional[0].is_string()) {
    const std::string& name = c.args.positional[0].str();
    const FilterFn f = find_filter(name);
    if (!f) Renderer::error(c.at, fmt::format("unknown filter '{}'", name));
    const CallArgs none;
    for (const Value& x : a) out.push_back(f(r, FilterCall{c.at, name, x, none}));
  } else {
    Renderer::error(c.at, "map needs attribute= or a filter name");
  }
  return Value::array(std::move(out));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"trim", trim},
      {"upper", upper},
      {"lower", lower},
      {"string", string},
      {"capitalize", capitalize},
      {"title", title},
      {"replace", replace},
      {"tojson", tojson},
      {"indent", indent},
      {"length", length},
      {"count", length},
      {"default", default_value},
      {"d", default_value},
      {"int", to_int},
      {"float", to_float},
      {"abs", abs},
      {"items", items},
      {"list", list},
      {"first", first},
      {"last", last},
      {"reverse", reverse},
      {"join", join},
      {"unique", unique},
      {"sum", sum},
      {"selectattr", selectattr},
      {"rejectattr", rejectattr},
      {"select", select},
      {"reject", reject},
      {"map", map},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace kvik::jinja
