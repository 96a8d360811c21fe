// Expressions of the Jinja renderer (see jinja_renderer.h).
#include <algorithm>
#include <cmath>

#include "chat/jinja_renderer.h"
#include "chat/jinja_text.h"

namespace kvik::jinja {

using K = Value::Kind;
using NK = Node::Kind;

Value Renderer::eval(const Node& n, const ScopePtr& scope) {
  Nesting guard(*this, n);
  Value v = eval_node(n, scope);
  // What builds new strings and lists pays for them (a variable or a literal is shared, not copied).
  if (n.kind == NK::kBinary || n.kind == NK::kFilter || n.kind == NK::kCall || n.kind == NK::kSlice) charge(n, v);
  return v;
}

Value Renderer::eval_node(const Node& n, const ScopePtr& scope) {
  switch (n.kind) {
    case NK::kLiteral: return n.value;
    case NK::kName: {
      if (const Value* v = scope->find(n.str)) return *v;
      return global(n, n.str);
    }
    case NK::kAttr: return attribute(n, eval(*n.kids[0], scope), n.str);
    case NK::kIndex: return index(n, eval(*n.kids[0], scope), eval(*n.kids[1], scope));
    case NK::kSlice: return slice(n, scope);
    case NK::kCall: {
      Value callee = eval(*n.kids[0], scope);
      return invoke(n, callee, eval_args(n, scope));
    }
    case NK::kFilter: return filter(n, scope);
    case NK::kTest: return test(n, scope);
    case NK::kUnary: return unary(n, scope);
    case NK::kBinary: return binary(n, scope);
    case NK::kTernary: return eval(*n.kids[0], scope).truthy() ? eval(*n.kids[1], scope) : eval(*n.kids[2], scope);
    case NK::kList:
    case NK::kTuple:
    case NK::kDict: return collection(n, scope);
    default: error(n, "not an expression");
  }
}

CallArgs Renderer::eval_args(const Node& call, const ScopePtr& scope) {
  CallArgs args;
  for (size_t k = 1; k < call.kids.size(); ++k) args.positional.push_back(eval(*call.kids[k], scope));
  for (const auto& [name, e] : call.kwargs) args.keyword.emplace_back(name, eval(*e, scope));
  return args;
}

Value Renderer::invoke(const Node& at, const Value& callee, const CallArgs& args) {
  if (callee.kind != K::kFunction) error(at, fmt::format("cannot call a {}", callee.type_name()));
  return (*callee.fn)(args);
}

Value Renderer::unary(const Node& n, const ScopePtr& scope) {
  const Value v = eval(*n.kids[0], scope);
  if (n.str == "not") return Value::boolean(!v.truthy());
  if (!v.is_number()) error(n, fmt::format("unary {} on a {}", n.str, v.type_name()));
  if (n.str == "+") return v;
  if (v.kind == K::kInt && v.i == INT64_MIN) error(n, "integer overflow");
  return v.kind == K::kInt ? Value::integer(-v.i) : Value::number(-v.f);
}

// [a, b], (a, b) and {k: v, ...} literals.
Value Renderer::collection(const Node& n, const ScopePtr& scope) {
  if (n.kind != NK::kDict) {
    Array a;
    for (const NodePtr& k : n.kids) a.push_back(eval(*k, scope));
    return Value::array(std::move(a));
  }
  Value d = Value::object();
  for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
    const Value key = eval(*n.kids[k], scope);
    if (!key.is_string()) error(*n.kids[k], "dict keys must be strings");
    d.set(key.str(), eval(*n.kids[k + 1], scope));
  }
  return d;
}

// namespace(), dict(), range(), raise_exception(); any other unknown name is undefined.
Value Renderer::global(const Node& n, const std::string& name) {
  if (name == "namespace" || name == "dict") {
    const K kind = name == "namespace" ? K::kNamespace : K::kObject;
    return Value::function([kind](const CallArgs& a) {
      Value ns = Value::object({}, kind);
      for (const Value& p : a.positional)
        if (p.is_mapping())
          for (const auto& [k, v] : *p.o) ns.set(k, v);
      for (const auto& [k, v] : a.keyword) ns.set(k, v);
      return ns;
    });
  }
  if (name == "range") return Value::function([this, &n](const CallArgs& a) { return range(n, a); });
  if (name == "raise_exception") {
    return Value::function([this, &n](const CallArgs& a) -> Value {
      error(n, "raise_exception: " + (a.positional.empty() ? std::string() : text(a.positional[0])));
    });
  }
  return Value();
}

Value Renderer::range(const Node& n, const CallArgs& a) {
  int64_t start = 0, stop = 0, step = 1;
  const auto num = [&](size_t k) {
    const std::optional<int64_t> v = whole(a.positional[k]);
    if (!v) error(n, "range() needs integers");
    return *v;
  };
  if (a.positional.size() == 1)
    stop = num(0);
  else if (a.positional.size() >= 2)
    start = num(0), stop = num(1);
  if (a.positional.size() >= 3) step = num(2);
  if (step == 0) error(n, "range() step must not be zero");
  Array out;
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
    count_iteration(n);
    out.push_back(Value::integer(static_cast<int64_t>(i)));
  }
  return Value::array(std::move(out));
}

Value Renderer::attribute(const Node& n, const Value& obj, const std::string& name) {
  if (obj.is_mapping()) {
    if (const Value* v = obj.get(name)) return *v;
    if (obj.kind == K::kObject) return dict_method(obj, name);
    return Value();
  }
  if (obj.is_string()) return string_method(n, obj, name);
  if (obj.is_array() && name == "length") return Value::integer(static_cast<int64_t>(obj.a->size()));
  if (obj.is_undefined()) error(n, fmt::format("'{}' of an undefined value", name));
  if (obj.is_none()) error(n, fmt::format("'{}' of none", name));
  return Value();
}

namespace {
int64_t norm_index(int64_t i, int64_t len) { return i < 0 ? i + len : i; }
}  // namespace

Value Renderer::index(const Node& n, const Value& obj, const Value& key) {
  if ((obj.is_array() || obj.is_string()) && key.is_number()) {
    const auto len = static_cast<int64_t>(obj.is_array() ? obj.a->size() : obj.str().size());
    const std::optional<int64_t> k = whole(key);
    if (!k) return Value();
    const int64_t i = norm_index(*k, len);
    if (i < 0 || i >= len) return Value();
    return obj.is_array() ? (*obj.a)[i] : Value::string(obj.str().substr(i, 1));
  }
  if ((obj.is_mapping() || obj.is_string()) && key.is_string()) return attribute(n, obj, key.str());
  if (obj.is_undefined()) error(n, "subscript of an undefined value");
  return Value();
}

Value Renderer::slice(const Node& n, const ScopePtr& scope) {
  const Value obj = eval(*n.kids[0], scope);
  const int64_t len = obj.is_array()    ? static_cast<int64_t>(obj.a->size())
                      : obj.is_string() ? static_cast<int64_t>(obj.str().size())
                                        : -1;
  if (len < 0) error(n, fmt::format("cannot slice a {}", obj.type_name()));
  const auto opt = [&](size_t k) -> std::optional<int64_t> {
    if (!n.kids[k]) return std::nullopt;
    const Value v = eval(*n.kids[k], scope);
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    const std::optional<int64_t> i = whole(v);
    if (!i) error(n, "slice indices must be integers");
    return i;
  };
  const auto a = opt(1), b = opt(2), c = opt(3);
  const int64_t step = c.value_or(1);
  if (step == 0) error(n, "slice step cannot be zero");
  const auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    const int64_t i = *v < 0 ? *v + len : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, len);
    return std::clamp<int64_t>(i, -1, len - 1);
  };
  const int64_t start = clamp(a, step > 0 ? 0 : len - 1), stop = clamp(b, step > 0 ? len : -1);
  Array items;
  std::string str;
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_array())
      items.push_back((*obj.a)[static_cast<size_t>(i)]);
    else
      str += obj.str()[static_cast<size_t>(i)];
  }
  return obj.is_array() ? Value::array(std::move(items)) : Value::string(std::move(str));
}

bool Renderer::contains(const Node& n, const Value& haystack, const Value& needle) {
  if (haystack.is_string() && needle.is_string()) return haystack.str().find(needle.str()) != std::string::npos;
  if (haystack.is_array())
    return std::any_of(haystack.a->begin(), haystack.a->end(), [&](const Value& x) { return same(x, needle); });
  if (haystack.is_mapping() && needle.is_string()) return haystack.get(needle.str()) != nullptr;
  if (haystack.is_undefined() || haystack.is_none()) return false;
  error(n, fmt::format("'in' on a {}", haystack.type_name()));
}

Value Renderer::binary(const Node& n, const ScopePtr& scope) {
  const std::string& op = n.str;
  const Value l = eval(*n.kids[0], scope);
  if (op == "and") return l.truthy() ? eval(*n.kids[1], scope) : l;
  if (op == "or") return l.truthy() ? l : eval(*n.kids[1], scope);
  const Value r = eval(*n.kids[1], scope);
  if (op == "==") return Value::boolean(same(l, r));
  if (op == "!=") return Value::boolean(!same(l, r));
  if (op == "in" || op == "not in") {
    const bool found = contains(n, r, l);
    return Value::boolean(op == "in" ? found : !found);
  }
  if (op == "~") return make_string(n, text(l) + text(r));
  if (l.is_number() && r.is_number()) return arithmetic(n, op, l, r);
  if (op == "+" && l.is_array() && r.is_array()) {
    if (l.a->size() + r.a->size() > static_cast<size_t>(limits_.max_loop_iterations))
      error(n, fmt::format("a list longer than {} items", limits_.max_loop_iterations));
    Array a = *l.a;
    a.insert(a.end(), r.a->begin(), r.a->end());
    return Value::array(std::move(a));
  }
  if (op == "+" && (l.is_string() || r.is_string()) && !l.is_undefined() && !r.is_undefined() && !l.is_none() &&
      !r.is_none())
    return make_string(n, text(l) + text(r));
  if (op == "*" && l.is_string() && r.kind == K::kInt) {
    if (r.i > 0 && l.str().size() > limits_.max_output_bytes / static_cast<uint64_t>(r.i))
      error(n, "string repetition is too large");
    std::string out;
    for (int64_t k = 0; k < r.i && !l.str().empty(); ++k) out += l.str();
    return Value::string(out);
  }
  if ((op == "<" || op == ">" || op == "<=" || op == ">=") && l.is_string() && r.is_string()) {
    const int c = l.str().compare(r.str());
    return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  error(n, fmt::format("unsupported operand types for {}: {} and {}", op, l.type_name(), r.type_name()));
}

// Comparisons and arithmetic of two numbers: integers stay integers (overflow is an error), as in Python.
Value Renderer::arithmetic(const Node& n, const std::string& op, const Value& l, const Value& r) {
  const bool fl = l.kind == K::kFloat || r.kind == K::kFloat;
  const double a = l.as_double(), b = r.as_double();
  if (op == "<") return Value::boolean(a < b);
  if (op == ">") return Value::boolean(a > b);
  if (op == "<=") return Value::boolean(a <= b);
  if (op == ">=") return Value::boolean(a >= b);
  if (op == "/") {
    if (b == 0) error(n, "division by zero");
    return Value::number(a / b);
  }
  if ((op == "//" || op == "%") && b == 0) error(n, "division by zero");
  if (!fl && !(op == "**" && r.i < 0)) {
    const std::optional<int64_t> v = int_op(op, l.i, r.i);
    if (!v) error(n, fmt::format("integer overflow in {} {} {}", l.i, op, r.i));
    return Value::integer(*v);
  }
  if (op == "+") return Value::number(a + b);
  if (op == "-") return Value::number(a - b);
  if (op == "*") return Value::number(a * b);
  if (op == "//") return Value::number(std::floor(a / b));
  if (op == "%") return Value::number(a - b * std::floor(a / b));
  if (op == "**") return Value::number(std::pow(a, b));
  error(n, fmt::format("unsupported operand types for {}: {} and {}", op, l.type_name(), r.type_name()));
}

// `x is [not] name arg`: the test from the one table (jinja_tests.cpp) that selectattr and select use too.
Value Renderer::test(const Node& n, const ScopePtr& scope) {
  const Value v = eval(*n.kids[0], scope);
  const Value arg = n.kids.size() > 1 ? eval(*n.kids[1], scope) : Value();
  const bool r = apply_test(*this, n, n.str, v, n.kids.size() > 1 ? &arg : nullptr);
  return Value::boolean(n.negated ? !r : r);
}

// `value | name(args)`: the filter from the table in jinja_filters.cpp.
Value Renderer::filter(const Node& n, const ScopePtr& scope) {
  const Value v = eval(*n.kids[0], scope);
  const CallArgs a = eval_args(n, scope);
  const FilterFn f = find_filter(n.str);
  if (!f) error(n, fmt::format("unknown filter '{}'", n.str));
  return f(*this, FilterCall{n, n.str, v, a});
}

}  // namespace kvik::jinja
