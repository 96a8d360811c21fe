// The tests (`value is name arg`), one table for `is` and for selectattr / rejectattr / select / reject.
#include <algorithm>

#include "chat/jinja_renderer.h"
#include "chat/jinja_text.h"

namespace kvik::jinja {

namespace {

using K = Value::Kind;
using TestFn = decltype(TestDef::fn);

bool odd_or_even(Renderer&, const Node& at, std::string_view name, const Value& v, const Value*) {
  if (v.kind != K::kInt) Renderer::error(at, fmt::format("'{}' test on a {}", name, v.type_name()));
  return (v.i % 2 != 0) == (name == "odd");
}

const std::vector<std::pair<std::string_view, TestDef>>& tests() {
  static const std::vector<std::pair<std::string_view, TestDef>> table = [] {
    std::vector<std::pair<std::string_view, TestDef>> t;
    using Pred = bool (*)(const Value&);
    const auto kind = [&t](std::string_view name, Pred pred) { t.push_back({name, {pred, nullptr, false}}); };
    const auto with_renderer = [&t](std::string_view name, TestFn fn) { t.push_back({name, {nullptr, fn, false}}); };
    kind("defined", [](const Value& v) { return !v.is_undefined(); });
    kind("undefined", [](const Value& v) { return v.is_undefined(); });
    kind("none", [](const Value& v) { return v.is_none(); });
    kind("string", [](const Value& v) { return v.is_string(); });
    kind("number", [](const Value& v) { return v.is_number(); });
    kind("integer", [](const Value& v) { return v.kind == K::kInt; });
    kind("float", [](const Value& v) { return v.kind == K::kFloat; });
    kind("boolean", [](const Value& v) { return v.kind == K::kBool; });
    kind("true", [](const Value& v) { return v.kind == K::kBool && v.b; });
    kind("false", [](const Value& v) { return v.kind == K::kBool && !v.b; });
    kind("mapping", [](const Value& v) { return v.kind == K::kObject; });
    kind("iterable", [](const Value& v) { return v.is_array() || v.is_string() || v.kind == K::kObject; });
    kind("sequence", [](const Value& v) { return v.is_array() || v.is_string(); });
    kind("callable", [](const Value& v) { return v.kind == K::kFunction; });
    kind("lower", [](const Value& v) { return v.is_string() && ascii_lower(v.str()) == v.str(); });
    kind("upper", [](const Value& v) { return v.is_string() && ascii_upper(v.str()) == v.str(); });
    with_renderer("odd", odd_or_even);
    with_renderer("even", odd_or_even);
    const auto compare = [&t](std::string_view name, TestFn fn) { t.push_back({name, {nullptr, fn, true}}); };
    const TestFn eq = [](Renderer& r, const Node&, std::string_view, const Value& v, const Value* a) {
      return r.same(v, *a);
    };
    const TestFn ne = [](Renderer& r, const Node&, std::string_view, const Value& v, const Value* a) {
      return !r.same(v, *a);
    };
    for (std::string_view name : {"equalto", "eq", "==", "sameas"}) compare(name, eq);
    for (std::string_view name : {"ne", "!="}) compare(name, ne);
    compare("in", [](Renderer& r, const Node& at, std::string_view, const Value& v, const Value* a) {
      return r.contains(at, *a, v);
    });
    return t;
  }();
  return table;
}

}  // namespace

const TestDef* find_test(std::string_view name) {
  const auto& t = tests();
  auto it = std::find_if(t.begin(), t.end(), [&](const auto& e) { return e.first == name; });
  return it == t.end() ? nullptr : &it->second;
}

std::vector<std::string_view> test_names() {
  std::vector<std::string_view> names;
  for (const auto& [name, def] : tests()) names.push_back(name);
  return names;
}

bool apply_test(Renderer& r, const Node& at, std::string_view name, const Value& v, const Value* arg) {
  const TestDef* t = find_test(name);
  if (!t) Renderer::error(at, fmt::format("unknown test '{}'", name));
  if (t->needs_arg && !arg) Renderer::error(at, fmt::format("'{}' test needs a value", name));
  return t->of_value ? t->of_value(v) : t->fn(r, at, name, v, arg);
}

}  // namespace kvik::jinja
