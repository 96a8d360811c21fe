// Methods of str and dict values: `s.startswith(x)`, `d.items()`, ... (see jinja_template.h for the list).
#include "chat/jinja_renderer.h"
#include "chat/jinja_text.h"

namespace kvik::jinja {

// A bound dict method: the function Value carries its dict in `o` (so a cycle check sees it), the function
// itself holds the dict weakly.
Value Renderer::dict_method(const Value& obj, const std::string& name) {
  const std::weak_ptr<Object> weak = obj.o;
  Value f;
  if (name == "items" || name == "keys" || name == "values") {
    f = Value::function([weak, name](const CallArgs&) {
      Array out;
      if (const auto o = weak.lock()) {
        for (const auto& [k, v] : *o) {
          if (name == "items")
            out.push_back(Value::array({Value::string(k), v}));
          else if (name == "keys")
            out.push_back(Value::string(k));
          else
            out.push_back(v);
        }
      }
      return Value::array(std::move(out));
    });
  } else if (name == "get") {
    f = Value::function([weak](const CallArgs& a) {
      const auto o = weak.lock();
      if (o && !a.positional.empty() && a.positional[0].is_string())
        for (const auto& [k, v] : *o)
          if (k == a.positional[0].str()) return v;
      return a.positional.size() > 1 ? a.positional[1] : Value::none();
    });
  } else {
    return Value();
  }
  f.o = obj.o;
  return f;
}

namespace {

// A string method's context: the string, the call's node, the method's name.
struct StrMethod {
  Renderer& r;
  const Node& n;
  std::shared_ptr<const std::string> s;
  std::string name;

  const std::string& arg_string(const CallArgs& a, size_t k) const {
    if (k >= a.positional.size() || !a.positional[k].is_string())
      Renderer::error(n, fmt::format("str.{}() needs a string argument", name));
    return a.positional[k].str();
  }
};

Value str_split(const StrMethod& m, const CallArgs& a) {
  const Value* sep = a.positional.empty() ? a.kw("sep") : &a.positional[0];
  const Value* mx = a.positional.size() > 1 ? &a.positional[1] : a.kw("maxsplit");
  if (sep && !sep->is_string() && !sep->is_none() && !sep->is_undefined())
    Renderer::error(m.n, "str.split() needs a string");
  const std::optional<int64_t> count = mx ? whole(*mx) : std::nullopt;
  Value parts = split(*m.s, sep, count.value_or(-1));
  m.r.charge(m.n, parts.a->size() * sizeof(Value));
  return parts;
}

Value str_replace(const StrMethod& m, const CallArgs& a) {
  const int64_t count = a.positional.size() > 2 ? whole(a.positional[2]).value_or(-1) : -1;
  const size_t max = m.r.limits().max_output_bytes;
  auto out = replace_all(*m.s, m.arg_string(a, 0), m.arg_string(a, 1), max, count);
  if (!out) Renderer::error(m.n, fmt::format("str.replace() makes a string longer than {} bytes", max));
  return Value::string(std::move(*out));
}

Value str_join(const StrMethod& m, const CallArgs& a) {
  if (a.positional.empty() || !a.positional[0].is_array()) Renderer::error(m.n, "str.join() needs a list");
  return m.r.join(m.n, *a.positional[0].a, *m.s, nullptr);
}

using StrMethodFn = Value (*)(const StrMethod& m, const CallArgs& a);

StrMethodFn find_str_method(const std::string& name) {
  static const std::unordered_map<std::string, StrMethodFn> table = {
      {"startswith",
       [](const StrMethod& m, const CallArgs& a) { return Value::boolean(m.s->starts_with(m.arg_string(a, 0))); }},
      {"endswith",
       [](const StrMethod& m, const CallArgs& a) { return Value::boolean(m.s->ends_with(m.arg_string(a, 0))); }},
      {"strip",
       [](const StrMethod& m, const CallArgs& a) {
         return Value::string(strip_chars(*m.s, a.positional.empty() ? nullptr : &a.positional[0], true, true));
       }},
      {"lstrip",
       [](const StrMethod& m, const CallArgs& a) {
         return Value::string(strip_chars(*m.s, a.positional.empty() ? nullptr : &a.positional[0], true, false));
       }},
      {"rstrip",
       [](const StrMethod& m, const CallArgs& a) {
         return Value::string(strip_chars(*m.s, a.positional.empty() ? nullptr : &a.positional[0], false, true));
       }},
      {"upper", [](const StrMethod& m, const CallArgs&) { return Value::string(ascii_upper(*m.s)); }},
      {"lower", [](const StrMethod& m, const CallArgs&) { return Value::string(ascii_lower(*m.s)); }},
      {"title", [](const StrMethod& m, const CallArgs&) { return Value::string(title_case(*m.s, true)); }},
      {"capitalize", [](const StrMethod& m, const CallArgs&) { return Value::string(title_case(*m.s, false)); }},
      {"split", str_split},
      {"replace", str_replace},
      {"join", str_join},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace

Value Renderer::string_method(const Node& n, const Value& obj, const std::string& name) {
  if (name == "length") return Value::integer(utf8_length(obj.str()));
  const StrMethodFn fn = find_str_method(name);
  if (!fn) return Value();
  return Value::function([m = StrMethod{*this, n, obj.s, name}, fn](const CallArgs& a) { return fn(m, a); });
}

Value Renderer::join(const Node& n, const Array& items, const std::string& sep, const Value* attr) {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += sep;
    out += text(attr ? attribute(n, items[k], text(*attr)) : items[k]);
    if (out.size() > limits_.max_output_bytes)
      error(n, fmt::format("join makes a string longer than {} bytes", limits_.max_output_bytes));
  }
  return Value::string(std::move(out));
}

}  // namespace kvik::jinja
