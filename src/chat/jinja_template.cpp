#include "chat/jinja_template.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kvik::jinja {

namespace {

using K = Value::Kind;
using NK = Node::Kind;

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  const auto drop = [&](char c) {
    return chars && chars->is_string() ? chars->s.find(c) != std::string::npos : is_ws(c);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string ascii_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count = -1) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python-style split: no separator splits on whitespace runs and drops empty pieces.
Value split(const std::string& s, const Value* sep, int64_t maxsplit) {
  Array parts;
  if (!sep || sep->is_none() || sep->is_undefined()) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_ws(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        j = s.size();
        while (j > i && is_ws(s[j - 1])) --j;
      } else {
        while (j < s.size() && !is_ws(s[j])) ++j;
      }
      parts.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
    return Value::array(std::move(parts));
  }
  const std::string& d = sep->s;
  size_t pos = 0;
  for (;;) {
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) || d.empty()
                          ? std::string::npos
                          : s.find(d, pos);
    if (at == std::string::npos) {
      parts.push_back(Value::string(s.substr(pos)));
      break;
    }
    parts.push_back(Value::string(s.substr(pos, at - pos)));
    pos = at + d.size();
  }
  return Value::array(std::move(parts));
}

// Python's len() on a UTF-8 string counts code points.
int64_t utf8_length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class Renderer {
 public:
  Renderer(const Limits& limits) : limits_(limits) {}

  void exec_block(const std::vector<NodePtr>& stmts, const ScopePtr& scope, std::string& out, Flow* flow) {
    for (const NodePtr& s : stmts) {
      exec(*s, scope, out, flow);
      if (*flow != Flow::kNormal) return;
    }
  }

  [[noreturn]] static void error(const Node& n, const std::string& what) { throw TemplateError(what, n.line, n.column); }

 private:
  void emit(const Node& at, std::string& out, const std::string& s) {
    out += s;
    if (out.size() > limits_.max_output_bytes)
      error(at, fmt::format("output exceeds {} bytes", limits_.max_output_bytes));
  }

  void exec(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow) {
    switch (n.kind) {
      case NK::kText: emit(n, out, n.str); return;
      case NK::kOutput: emit(n, out, eval(*n.kids[0], scope).to_output()); return;
      case NK::kIf:
        exec_block(eval(*n.kids[0], scope).truthy() ? n.body : n.orelse, scope, out, flow);
        return;
      case NK::kFor: exec_for(n, scope, out, flow); return;
      case NK::kSet: assign(n, scope, eval(*n.kids[0], scope)); return;
      case NK::kSetBlock: {
        std::string captured;
        Flow f = Flow::kNormal;
        exec_block(n.body, scope, captured, &f);
        assign(n, scope, Value::string(std::move(captured)));
        return;
      }
      case NK::kMacro: scope->vars[n.str] = make_macro(n, scope); return;
      case NK::kCallBlock: {
        // {% call(args) m(...) %}body{% endcall %}: m sees `caller()` rendering the body.
        const Node& call = *n.kids[0];
        if (call.kind != NK::kCall) error(n, "{% call %} needs a macro call");
        Value caller = make_macro(n, scope);
        Value callee = eval(*call.kids[0], scope);
        CallArgs args = eval_args(call, scope);
        args.keyword.emplace_back("caller", caller);
        emit(n, out, invoke(call, callee, args).to_output());
        return;
      }
      case NK::kBreak: *flow = Flow::kBreak; return;
      case NK::kContinue: *flow = Flow::kContinue; return;
      default: emit(n, out, eval(n, scope).to_output()); return;
    }
  }

  void assign(const Node& n, const ScopePtr& scope, Value v) {
    if (!n.str.empty()) {
      // {% set ns.attr = v %}
      const Value* target = scope->find(n.names[0]);
      if (!target || target->kind != K::kNamespace)
        error(n, fmt::format("cannot set attribute '{}' of '{}': it is not a namespace()", n.str, n.names[0]));
      const_cast<Value*>(target)->set(n.str, std::move(v));
      return;
    }
    if (n.names.size() == 1) {
      scope->vars[n.names[0]] = std::move(v);
      return;
    }
    if (!v.is_array() || v.a->size() != n.names.size())
      error(n, fmt::format("cannot unpack {} into {} names", v.type_name(), n.names.size()));
    for (size_t k = 0; k < n.names.size(); ++k) scope->vars[n.names[k]] = (*v.a)[k];
  }

  void exec_for(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow) {
    const Value seq = eval(*n.kids[0], scope);
    Array items;
    switch (seq.kind) {
      case K::kArray: items = *seq.a; break;
      case K::kObject:
        for (const auto& [k, v] : *seq.o) items.push_back(Value::string(k));
        break;
      case K::kString:
        for (size_t i = 0; i < seq.s.size();) {
          size_t len = 1;
          const auto c = static_cast<unsigned char>(seq.s[i]);
          if (c >= 0xF0) len = 4;
          else if (c >= 0xE0) len = 3;
          else if (c >= 0xC0) len = 2;
          items.push_back(Value::string(seq.s.substr(i, len)));
          i += len;
        }
        break;
      case K::kUndefined:
      case K::kNone: break;
      default: error(n, fmt::format("cannot loop over a {}", seq.type_name()));
    }
    auto body_scope = std::make_shared<Scope>();
    body_scope->parent = scope;
    const auto bind = [&](const Value& item) {
      if (n.names.size() == 1) {
        body_scope->vars[n.names[0]] = item;
      } else {
        if (!item.is_array() || item.a->size() != n.names.size())
          error(n, fmt::format("cannot unpack {} into {} loop variables", item.type_name(), n.names.size()));
        for (size_t k = 0; k < n.names.size(); ++k) body_scope->vars[n.names[k]] = (*item.a)[k];
      }
    };
    if (n.kids.size() > 1) {  // {% for x in xs if cond %}
      Array kept;
      for (const Value& item : items) {
        count_iteration(n);
        bind(item);
        if (eval(*n.kids[1], body_scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Flow f = Flow::kNormal;
      exec_block(n.orelse, scope, out, &f);
      return;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      count_iteration(n);
      bind(items[i]);
      Value loop = Value::object({
          {"index", Value::integer(i + 1)},
          {"index0", Value::integer(i)},
          {"revindex", Value::integer(len - i)},
          {"revindex0", Value::integer(len - i - 1)},
          {"first", Value::boolean(i == 0)},
          {"last", Value::boolean(i == len - 1)},
          {"length", Value::integer(len)},
          {"previtem", i > 0 ? items[i - 1] : Value()},
          {"nextitem", i + 1 < len ? items[i + 1] : Value()},
      });
      body_scope->vars["loop"] = std::move(loop);
      Flow f = Flow::kNormal;
      exec_block(n.body, body_scope, out, &f);
      if (f == Flow::kBreak) break;
    }
    (void)flow;
  }

  void count_iteration(const Node& n) {
    if (++iterations_ > limits_.max_loop_iterations)
      error(n, fmt::format("more than {} loop iterations", limits_.max_loop_iterations));
  }

  Value make_macro(const Node& n, const ScopePtr& scope) {
    const Node* def = &n;
    ScopePtr closure = scope;
    return Value::function([this, def, closure](const CallArgs& args) -> Value {
      if (++depth_ > limits_.max_call_depth) {
        --depth_;
        error(*def, fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
      }
      auto s = std::make_shared<Scope>();
      s->parent = closure;
      for (size_t k = 0; k < def->names.size(); ++k) {
        const std::string& p = def->names[k];
        if (k < args.positional.size()) {
          s->vars[p] = args.positional[k];
        } else if (const Value* v = args.kw(p)) {
          s->vars[p] = *v;
        } else {
          s->vars[p] = Value();
          for (const auto& [name, expr] : def->kwargs)
            if (name == p) s->vars[p] = eval(*expr, closure);
        }
      }
      if (const Value* c = args.kw("caller")) s->vars["caller"] = *c;
      std::string out;
      Flow f = Flow::kNormal;
      try {
        exec_block(def->body, s, out, &f);
      } catch (...) {
        --depth_;
        throw;
      }
      --depth_;
      return Value::string(std::move(out));
    });
  }

  CallArgs eval_args(const Node& call, const ScopePtr& scope) {
    CallArgs args;
    for (size_t k = 1; k < call.kids.size(); ++k) args.positional.push_back(eval(*call.kids[k], scope));
    for (const auto& [name, e] : call.kwargs) args.keyword.emplace_back(name, eval(*e, scope));
    return args;
  }

  Value invoke(const Node& at, const Value& callee, const CallArgs& args) {
    if (callee.kind != K::kFunction) error(at, fmt::format("cannot call a {}", callee.type_name()));
    return (*callee.fn)(args);
  }

  // Expressions --------------------------------------------------------------------------------------

  Value eval(const Node& n, const ScopePtr& scope) {
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
      case NK::kTest: {
        const bool r = test(n, scope);
        return Value::boolean(n.negated ? !r : r);
      }
      case NK::kUnary: {
        const Value v = eval(*n.kids[0], scope);
        if (n.str == "not") return Value::boolean(!v.truthy());
        if (!v.is_number()) error(n, fmt::format("unary {} on a {}", n.str, v.type_name()));
        if (n.str == "+") return v;
        return v.kind == K::kInt ? Value::integer(-v.i) : Value::number(-v.f);
      }
      case NK::kBinary: return binary(n, scope);
      case NK::kTernary:
        return eval(*n.kids[0], scope).truthy() ? eval(*n.kids[1], scope) : eval(*n.kids[2], scope);
      case NK::kList:
      case NK::kTuple: {
        Array a;
        for (const NodePtr& k : n.kids) a.push_back(eval(*k, scope));
        return Value::array(std::move(a));
      }
      case NK::kDict: {
        Value d = Value::object();
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          const Value key = eval(*n.kids[k], scope);
          if (!key.is_string()) error(*n.kids[k], "dict keys must be strings");
          d.set(key.s, eval(*n.kids[k + 1], scope));
        }
        return d;
      }
      default: error(n, "not an expression");
    }
  }

  Value global(const Node& n, const std::string& name) {
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
    if (name == "range") {
      return Value::function([this, &n](const CallArgs& a) {
        int64_t start = 0, stop = 0, step = 1;
        const auto num = [&](size_t k) {
          if (!a.positional[k].is_number()) error(n, "range() needs integers");
          return static_cast<int64_t>(a.positional[k].as_double());
        };
        if (a.positional.size() == 1) stop = num(0);
        else if (a.positional.size() >= 2) start = num(0), stop = num(1);
        if (a.positional.size() >= 3) step = num(2);
        if (step == 0) error(n, "range() step must not be zero");
        Array out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          count_iteration(n);
          out.push_back(Value::integer(i));
        }
        return Value::array(std::move(out));
      });
    }
    if (name == "raise_exception") {
      return Value::function([&n](const CallArgs& a) -> Value {
        error(n, "raise_exception: " + (a.positional.empty() ? std::string() : a.positional[0].to_output()));
      });
    }
    return Value();
  }

  Value attribute(const Node& n, const Value& obj, const std::string& name) {
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

  Value dict_method(const Value& obj, const std::string& name) {
    if (name == "items" || name == "keys" || name == "values") {
      return Value::function([obj, name](const CallArgs&) {
        Array out;
        for (const auto& [k, v] : *obj.o) {
          if (name == "items") out.push_back(Value::array({Value::string(k), v}));
          else if (name == "keys") out.push_back(Value::string(k));
          else out.push_back(v);
        }
        return Value::array(std::move(out));
      });
    }
    if (name == "get") {
      return Value::function([obj](const CallArgs& a) {
        if (!a.positional.empty() && a.positional[0].is_string())
          if (const Value* v = obj.get(a.positional[0].s)) return *v;
        return a.positional.size() > 1 ? a.positional[1] : Value::none();
      });
    }
    return Value();
  }

  Value string_method(const Node& n, const Value& obj, const std::string& name) {
    const std::string s = obj.s;
    const auto arg_string = [&n, name](const CallArgs& a, size_t k) -> const std::string& {
      if (k >= a.positional.size() || !a.positional[k].is_string())
        error(n, fmt::format("str.{}() needs a string argument", name));
      return a.positional[k].s;
    };
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return Value::function([s, starts, arg_string](const CallArgs& a) {
        const std::string& p = arg_string(a, 0);
        return Value::boolean(starts ? s.starts_with(p) : s.ends_with(p));
      });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return Value::function([s, l, r](const CallArgs& a) {
        return Value::string(strip_chars(s, a.positional.empty() ? nullptr : &a.positional[0], l, r));
      });
    }
    if (name == "upper") return Value::function([s](const CallArgs&) { return Value::string(ascii_upper(s)); });
    if (name == "lower") return Value::function([s](const CallArgs&) { return Value::string(ascii_lower(s)); });
    if (name == "title" || name == "capitalize") {
      const bool title = name == "title";
      return Value::function([s, title](const CallArgs&) {
        std::string out = title ? s : ascii_lower(s);
        bool start = true;
        for (char& c : out) {
          if (start) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          else if (title) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          start = title ? is_ws(c) : false;
        }
        return Value::string(out);
      });
    }
    if (name == "split") {
      return Value::function([s](const CallArgs& a) {
        const Value* sep = a.positional.empty() ? a.kw("sep") : &a.positional[0];
        const Value* mx = a.positional.size() > 1 ? &a.positional[1] : a.kw("maxsplit");
        return split(s, sep, mx && mx->is_number() ? static_cast<int64_t>(mx->as_double()) : -1);
      });
    }
    if (name == "replace") {
      return Value::function([s, arg_string](const CallArgs& a) {
        const int64_t count = a.positional.size() > 2 && a.positional[2].is_number() ? a.positional[2].i : -1;
        return Value::string(replace_all(s, arg_string(a, 0), arg_string(a, 1), count));
      });
    }
    if (name == "join") {
      return Value::function([s, &n](const CallArgs& a) {
        if (a.positional.empty() || !a.positional[0].is_array()) error(n, "str.join() needs a list");
        std::string out;
        for (size_t k = 0; k < a.positional[0].a->size(); ++k) {
          if (k) out += s;
          out += (*a.positional[0].a)[k].to_output();
        }
        return Value::string(out);
      });
    }
    if (name == "length") return Value::integer(utf8_length(s));
    return Value();
  }

  static int64_t norm_index(int64_t i, int64_t len) { return i < 0 ? i + len : i; }

  Value index(const Node& n, const Value& obj, const Value& key) {
    if (obj.is_array() && key.is_number()) {
      const auto len = static_cast<int64_t>(obj.a->size());
      const int64_t i = norm_index(static_cast<int64_t>(key.as_double()), len);
      return i >= 0 && i < len ? (*obj.a)[i] : Value();
    }
    if (obj.is_mapping() && key.is_string()) return attribute(n, obj, key.s);
    if (obj.is_string() && key.is_number()) {
      const auto len = static_cast<int64_t>(obj.s.size());
      const int64_t i = norm_index(static_cast<int64_t>(key.as_double()), len);
      return i >= 0 && i < len ? Value::string(obj.s.substr(i, 1)) : Value();
    }
    if (obj.is_string() && key.is_string()) return attribute(n, obj, key.s);
    if (obj.is_undefined()) error(n, "subscript of an undefined value");
    return Value();
  }

  Value slice(const Node& n, const ScopePtr& scope) {
    const Value obj = eval(*n.kids[0], scope);
    int64_t len = obj.is_array() ? static_cast<int64_t>(obj.a->size()) : obj.is_string() ? static_cast<int64_t>(obj.s.size()) : -1;
    if (len < 0) error(n, fmt::format("cannot slice a {}", obj.type_name()));
    const auto opt = [&](size_t k) -> std::optional<int64_t> {
      if (!n.kids[k]) return std::nullopt;
      const Value v = eval(*n.kids[k], scope);
      if (v.is_none() || v.is_undefined()) return std::nullopt;
      if (!v.is_number()) error(n, "slice indices must be integers");
      return static_cast<int64_t>(v.as_double());
    };
    const auto a = opt(1), b = opt(2), c = opt(3);
    const int64_t step = c.value_or(1);
    if (step == 0) error(n, "slice step cannot be zero");
    const auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t i = *v < 0 ? *v + len : *v;
      if (step > 0) return std::clamp<int64_t>(i, 0, len);
      return std::clamp<int64_t>(i, -1, len - 1);
    };
    const int64_t start = clamp(a, step > 0 ? 0 : len - 1), stop = clamp(b, step > 0 ? len : -1);
    Array items;
    std::string str;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.is_array()) items.push_back((*obj.a)[i]);
      else str += obj.s[i];
    }
    return obj.is_array() ? Value::array(std::move(items)) : Value::string(std::move(str));
  }

  Value binary(const Node& n, const ScopePtr& scope) {
    const std::string& op = n.str;
    const Value l = eval(*n.kids[0], scope);
    if (op == "and") return l.truthy() ? eval(*n.kids[1], scope) : l;
    if (op == "or") return l.truthy() ? l : eval(*n.kids[1], scope);
    const Value r = eval(*n.kids[1], scope);
    if (op == "==") return Value::boolean(equals(l, r));
    if (op == "!=") return Value::boolean(!equals(l, r));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string() && l.is_string()) found = r.s.find(l.s) != std::string::npos;
      else if (r.is_array()) found = std::any_of(r.a->begin(), r.a->end(), [&](const Value& x) { return equals(x, l); });
      else if (r.is_mapping() && l.is_string()) found = r.get(l.s) != nullptr;
      else if (r.is_undefined() || r.is_none()) found = false;
      else error(n, fmt::format("'in' on a {}", r.type_name()));
      return Value::boolean(op == "in" ? found : !found);
    }
    if (op == "~") return Value::string(l.to_output() + r.to_output());
    if (l.is_number() && r.is_number()) {
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
      if (!fl) {
        const int64_t x = l.i, y = r.i;
        if (op == "+") return Value::integer(x + y);
        if (op == "-") return Value::integer(x - y);
        if (op == "*") return Value::integer(x * y);
        if ((op == "//" || op == "%") && y == 0) error(n, "division by zero");
        if (op == "//") return Value::integer(static_cast<int64_t>(std::floor(static_cast<double>(x) / y)));
        if (op == "%") return Value::integer(((x % y) + y) % y);
        if (op == "**") return Value::integer(static_cast<int64_t>(std::pow(a, b)));
      }
      if (op == "+") return Value::number(a + b);
      if (op == "-") return Value::number(a - b);
      if (op == "*") return Value::number(a * b);
      if (op == "//") return Value::number(std::floor(a / b));
      if (op == "%") return Value::number(std::fmod(a, b));
      if (op == "**") return Value::number(std::pow(a, b));
    }
    if (op == "+" && l.is_array() && r.is_array()) {
      Array a = *l.a;
      a.insert(a.end(), r.a->begin(), r.a->end());
      return Value::array(std::move(a));
    }
    if (op == "+" && (l.is_string() || r.is_string()) && !l.is_undefined() && !r.is_undefined() && !l.is_none() &&
        !r.is_none())
      return Value::string(l.to_output() + r.to_output());
    if (op == "*" && l.is_string() && r.kind == K::kInt) {
      std::string out;
      for (int64_t k = 0; k < r.i; ++k) {
        out += l.s;
        if (out.size() > limits_.max_output_bytes) error(n, "string repetition is too large");
      }
      return Value::string(out);
    }
    if ((op == "<" || op == ">" || op == "<=" || op == ">=") && l.is_string() && r.is_string()) {
      const int c = l.s.compare(r.s);
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    error(n, fmt::format("unsupported operand types for {}: {} and {}", op, l.type_name(), r.type_name()));
  }

  bool test(const Node& n, const ScopePtr& scope) {
    const Value v = eval(*n.kids[0], scope);
    const std::string& t = n.str;
    if (t == "defined") return !v.is_undefined();
    if (t == "undefined") return v.is_undefined();
    if (t == "none") return v.is_none();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.kind == K::kInt;
    if (t == "float") return v.kind == K::kFloat;
    if (t == "boolean") return v.kind == K::kBool;
    if (t == "true") return v.kind == K::kBool && v.b;
    if (t == "false") return v.kind == K::kBool && !v.b;
    if (t == "mapping") return v.kind == K::kObject;
    if (t == "iterable") return v.is_array() || v.is_string() || v.kind == K::kObject;
    if (t == "sequence") return v.is_array() || v.is_string();
    if (t == "callable") return v.kind == K::kFunction;
    if (t == "odd" || t == "even") {
      if (v.kind != K::kInt) error(n, fmt::format("'{}' test on a {}", t, v.type_name()));
      return (v.i % 2 != 0) == (t == "odd");
    }
    if (t == "lower") return v.is_string() && ascii_lower(v.s) == v.s;
    if (t == "upper") return v.is_string() && ascii_upper(v.s) == v.s;
    if (t == "equalto" || t == "eq" || t == "sameas") {
      if (n.kids.size() < 2) error(n, fmt::format("'{}' test needs a value", t));
      return equals(v, eval(*n.kids[1], scope));
    }
    error(n, fmt::format("unknown test '{}'", t));
  }

  Value filter(const Node& n, const ScopePtr& scope) {
    const Value v = eval(*n.kids[0], scope);
    CallArgs a = eval_args(n, scope);
    const std::string& f = n.str;
    const auto arg = [&](size_t k, const char* kw) -> const Value* {
      if (k < a.positional.size()) return &a.positional[k];
      return kw ? a.kw(kw) : nullptr;
    };
    if (f == "trim") return Value::string(strip_chars(v.to_output(), arg(0, "chars"), true, true));
    if (f == "length" || f == "count") {
      if (v.is_string()) return Value::integer(utf8_length(v.s));
      if (v.is_array()) return Value::integer(static_cast<int64_t>(v.a->size()));
      if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.o->size()));
      error(n, fmt::format("length of a {}", v.type_name()));
    }
    if (f == "default" || f == "d") {
      const Value* dflt = arg(0, "default_value");
      const Value* boolean = arg(1, "boolean");
      const bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
      return use ? (dflt ? *dflt : Value::string("")) : v;
    }
    if (f == "upper") return Value::string(ascii_upper(v.to_output()));
    if (f == "lower") return Value::string(ascii_lower(v.to_output()));
    if (f == "string") return Value::string(v.to_output());
    if (f == "capitalize" || f == "title") return invoke(n, string_method(n, Value::string(v.to_output()), f), {});
    if (f == "replace") {
      const Value* from = arg(0, "old");
      const Value* to = arg(1, "new");
      if (!from || !to || !from->is_string() || !to->is_string()) error(n, "replace needs two strings");
      return Value::string(replace_all(v.to_output(), from->s, to->s));
    }
    if (f == "tojson") {
      const Value* indent = arg(0, "indent");
      return Value::string(to_json(v, indent && indent->is_number() ? static_cast<int>(indent->as_double()) : 0));
    }
    if (f == "int") {
      if (v.is_number()) return Value::integer(static_cast<int64_t>(v.as_double()));
      if (v.is_string()) {
        try {
          return Value::integer(std::stoll(v.s));
        } catch (const std::exception&) {
        }
      }
      return Value::integer(0);
    }
    if (f == "float") return Value::number(v.is_number() ? v.as_double() : v.is_string() ? std::atof(v.s.c_str()) : 0.0);
    if (f == "abs") {
      if (!v.is_number()) error(n, "abs of a non-number");
      return v.kind == K::kInt ? Value::integer(v.i < 0 ? -v.i : v.i) : Value::number(std::fabs(v.f));
    }
    if (f == "items") return invoke(n, dict_method(v, "items"), {});
    if (f == "indent") {
      const Value* width = arg(0, "width");
      const Value* first = arg(1, "first");
      const std::string pad(width && width->is_number() ? static_cast<size_t>(width->as_double()) : 4, ' ');
      std::string s = v.to_output(), out = first && first->truthy() ? pad : "";
      for (size_t k = 0; k < s.size(); ++k) {
        out += s[k];
        if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') out += pad;
      }
      return Value::string(out);
    }
    // List filters.
    Array items;
    if (v.is_array()) items = *v.a;
    else if (v.is_string()) for (char c : v.s) items.push_back(Value::string(std::string(1, c)));
    else if (v.kind == K::kObject) for (const auto& [k, x] : *v.o) items.push_back(Value::string(k));
    else if (!v.is_undefined() && !v.is_none()) error(n, fmt::format("filter '{}' on a {}", f, v.type_name()));
    if (f == "list") return Value::array(items);
    if (f == "first") return items.empty() ? Value() : items.front();
    if (f == "last") return items.empty() ? Value() : items.back();
    if (f == "reverse") return Value::array(Array(items.rbegin(), items.rend()));
    if (f == "join") {
      const Value* sep = arg(0, "d");
      const Value* attr = arg(1, "attribute");
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (k && sep) out += sep->to_output();
        out += (attr ? attribute(n, items[k], attr->to_output()) : items[k]).to_output();
      }
      return Value::string(out);
    }
    if (f == "unique") {
      Array out;
      for (const Value& x : items)
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equals(x, y); })) out.push_back(x);
      return Value::array(std::move(out));
    }
    if (f == "sum") {
      Value total = Value::integer(0);
      for (const Value& x : items) {
        if (!x.is_number()) error(n, "sum of a non-number");
        total = total.kind == K::kInt && x.kind == K::kInt ? Value::integer(total.i + x.i)
                                                           : Value::number(total.as_double() + x.as_double());
      }
      return total;
    }
    if (f == "selectattr" || f == "rejectattr") {
      const Value* attr = arg(0, nullptr);
      if (!attr || !attr->is_string()) error(n, fmt::format("{} needs an attribute name", f));
      const Value* test_name = arg(1, nullptr);
      const Value* test_arg = arg(2, nullptr);
      Array out;
      for (const Value& x : items) {
        const Value field = x.is_mapping() ? (x.get(attr->s) ? *x.get(attr->s) : Value()) : Value();
        bool ok;
        if (!test_name) {
          ok = field.truthy();
        } else {
          const std::string t = test_name->to_output();
          if (t == "defined") ok = !field.is_undefined();
          else if (t == "undefined") ok = field.is_undefined();
          else if (t == "none") ok = field.is_none();
          else if (t == "equalto" || t == "eq" || t == "==") ok = test_arg && equals(field, *test_arg);
          else if (t == "ne" || t == "!=") ok = !(test_arg && equals(field, *test_arg));
          else if (t == "string") ok = field.is_string();
          else if (t == "true") ok = field.kind == K::kBool && field.b;
          else if (t == "false") ok = field.kind == K::kBool && !field.b;
          else if (t == "in") ok = test_arg && test_arg->is_array() && std::any_of(test_arg->a->begin(), test_arg->a->end(), [&](const Value& y) { return equals(field, y); });
          else error(n, fmt::format("{}: unknown test '{}'", f, t));
        }
        if (ok == (f == "selectattr")) out.push_back(x);
      }
      return Value::array(std::move(out));
    }
    if (f == "map") {
      Array out;
      if (const Value* attr = a.kw("attribute")) {
        const Value* dflt = a.kw("default");
        for (const Value& x : items) {
          Value field = attribute(n, x, attr->to_output());
          out.push_back(field.is_undefined() && dflt ? *dflt : field);
        }
      } else if (!a.positional.empty() && a.positional[0].is_string()) {
        // map('upper') etc.: apply a one-argument filter by name.
        Node call = {};
        call.kind = NK::kFilter;
        call.line = n.line;
        call.column = n.column;
        call.str = a.positional[0].s;
        auto tmp = std::make_shared<Scope>();
        tmp->parent = scope;
        auto lit = std::make_unique<Node>();
        lit->kind = NK::kName;
        lit->str = "__map_item__";
        call.kids.push_back(std::move(lit));
        for (const Value& x : items) {
          tmp->vars["__map_item__"] = x;
          out.push_back(filter(call, tmp));
        }
      } else {
        error(n, "map needs attribute= or a filter name");
      }
      return Value::array(std::move(out));
    }
    error(n, fmt::format("unknown filter '{}'", f));
  }

  const Limits& limits_;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace

Template::Template(const std::string& source, Limits limits) : program_(parse(lex(source))), limits_(limits) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

std::string Template::render(const Value& context) const {
  auto globals = std::make_shared<Scope>();
  if (context.is_mapping())
    for (const auto& [k, v] : *context.o) globals->vars[k] = v;
  auto scope = std::make_shared<Scope>();
  scope->parent = globals;
  Renderer r(limits_);
  std::string out;
  Flow flow = Flow::kNormal;
  r.exec_block(program_, scope, out, &flow);
  return out;
}

}  // namespace kvik::jinja
