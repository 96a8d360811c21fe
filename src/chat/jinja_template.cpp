#include "chat/jinja_template.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
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
    return chars && chars->is_string() ? chars->str().find(c) != std::string::npos : is_ws(c);
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

// nullopt when the result would pass max_bytes.
std::optional<std::string> replace_all(const std::string& s, const std::string& from, const std::string& to,
                                       size_t max_bytes, int64_t count = -1) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    if (out.size() > max_bytes) return std::nullopt;
    pos = at + from.size();
  }
  out.append(s, pos, std::string::npos);
  if (out.size() > max_bytes) return std::nullopt;
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
  const std::string& d = sep->str();
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

// A number as an integer index, count or width: floats must be whole and inside int64 (no UB casts).
std::optional<int64_t> whole(const Value& v) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b ? 1 : 0;
  if (v.kind != Value::Kind::kFloat || v.f != std::floor(v.f) || !(std::fabs(v.f) < 9.2e18)) return std::nullopt;
  return static_cast<int64_t>(v.f);
}

// Python's integer arithmetic within int64; nullopt on overflow (Python would grow a big integer).
std::optional<int64_t> int_op(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? std::nullopt : std::optional(r);
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? std::nullopt : std::optional(r);
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? std::nullopt : std::optional(r);
  if (op == "//" || op == "%") {  // floor division and its remainder (sign of the divisor)
    if (y == -1) return op == "%" ? std::optional<int64_t>(0) : int_op("-", 0, x);
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
    return op == "//" ? q : m;
  }
  if (op == "**") {  // y >= 0
    int64_t base = x;
    r = 1;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return std::nullopt;
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return std::nullopt;
    }
    return r;
  }
  return std::nullopt;
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
  // Recursion through statements, expressions and macro calls together; with the parser's bound on each
  // template's nesting it keeps a render's stack small whatever the template does.
  static constexpr int kMaxNesting = 500;
  struct Nesting {
    Renderer& r;
    Nesting(Renderer& r, const Node& at) : r(r) {
      if (++r.nesting_ > kMaxNesting) {
        --r.nesting_;
        error(at, fmt::format("template recursion deeper than {}", kMaxNesting));
      }
    }
    ~Nesting() { --r.nesting_; }
  };

  // Every string and list a render builds or copies is paid for here, so a hostile template's time is bounded.
  void charge(const Node& at, size_t bytes) {
    work_ += static_cast<int64_t>(std::min<size_t>(bytes, INT64_MAX / 2));
    if (work_ > limits_.max_work_bytes)
      error(at, fmt::format("the template builds more than {} bytes of strings and lists", limits_.max_work_bytes));
  }
  void charge(const Node& at, const Value& v) {
    if (v.is_string()) charge(at, v.str().size());
    else if (v.is_array()) charge(at, v.a->size() * sizeof(Value));
    else if (v.kind == K::kObject) charge(at, v.o->size() * sizeof(Value));
  }
  Value make_string(const Node& at, std::string s) {
    if (s.size() > limits_.max_output_bytes)
      error(at, fmt::format("a string longer than {} bytes", limits_.max_output_bytes));
    return Value::string(std::move(s));
  }
  // How a value prints, at most max_output_bytes.
  std::string text(const Value& v) const { return v.to_output(limits_.max_output_bytes); }
  bool same(const Value& x, const Value& y) {
    int64_t budget = std::max<int64_t>(0, (limits_.max_work_bytes - work_) / 64);
    const int64_t before = budget;
    const bool r = equals(x, y, &budget);
    work_ += (before - budget) * 64;
    return r;
  }

  void emit(const Node& at, std::string& out, const std::string& s) {
    if (out.size() + s.size() > limits_.max_output_bytes)
      error(at, fmt::format("output exceeds {} bytes", limits_.max_output_bytes));
    charge(at, s.size());
    out += s;
  }

  void exec(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow) {
    Nesting guard(*this, n);
    try {
      exec_node(n, scope, out, flow);
    } catch (const TemplateError&) {
      throw;
    } catch (const Error& e) {  // from the value layer (printing, comparing, input depth): give it a place
      error(n, e.what());
    }
  }

  void exec_node(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow) {
    switch (n.kind) {
      case NK::kText: emit(n, out, n.str); return;
      case NK::kOutput: emit(n, out, text(eval(*n.kids[0], scope))); return;
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
      case NK::kCallBlock: call_block(n, scope, out); return;
      case NK::kBreak: *flow = Flow::kBreak; return;
      case NK::kContinue: *flow = Flow::kContinue; return;
      default: emit(n, out, text(eval(n, scope))); return;
    }
  }

  // {% call(args) m(...) %}body{% endcall %}: m sees `caller()` rendering the body.
  [[gnu::noinline]] void call_block(const Node& n, const ScopePtr& scope, std::string& out) {
    const Node& call = *n.kids[0];
    if (call.kind != NK::kCall) error(n, "{% call %} needs a macro call");
    Value caller = make_macro(n, scope);
    Value callee = eval(*call.kids[0], scope);
    CallArgs args = eval_args(call, scope);
    args.keyword.emplace_back("caller", caller);
    emit(n, out, text(invoke(call, callee, args)));
  }

  // How deep `v` nests (lists, dicts, namespaces, a bound method's dict), each shared container walked once;
  // `into` (a namespace being written) must not be inside it, or the namespace would contain itself.
  int depth_of(const Node& at, const Value& v, const Object* into, std::unordered_map<const void*, int>& seen) {
    const void* key = v.is_array() ? static_cast<const void*>(v.a.get()) : static_cast<const void*>(v.o.get());
    if (!key) return 0;
    if (key == into) error(at, "a namespace cannot be stored inside itself");
    if (auto it = seen.find(key); it != seen.end()) return it->second;
    seen[key] = 0;
    int d = 0;
    if (v.is_array()) {
      charge(at, v.a->size() * 16);
      for (const Value& x : *v.a) d = std::max(d, depth_of(at, x, into, seen));
    } else {
      charge(at, v.o->size() * 16);
      for (const auto& [k, x] : *v.o) d = std::max(d, depth_of(at, x, into, seen));
    }
    if (++d > kMaxValueDepth) error(at, fmt::format("a value nesting deeper than {} levels", kMaxValueDepth));
    return seen[key] = d;
  }

  [[gnu::noinline]] void assign(const Node& n, const ScopePtr& scope, Value v) {
    std::unordered_map<const void*, int> seen;
    if (!n.str.empty()) {
      // {% set ns.attr = v %}
      const Value* target = scope->find(n.names[0]);
      if (!target || target->kind != K::kNamespace)
        error(n, fmt::format("cannot set attribute '{}' of '{}': it is not a namespace()", n.str, n.names[0]));
      depth_of(n, v, target->o.get(), seen);
      const_cast<Value*>(target)->set(n.str, std::move(v));
      return;
    }
    depth_of(n, v, nullptr, seen);
    if (n.names.size() == 1) {
      scope->vars[n.names[0]] = std::move(v);
      return;
    }
    if (!v.is_array() || v.a->size() != n.names.size())
      error(n, fmt::format("cannot unpack {} into {} names", v.type_name(), n.names.size()));
    for (size_t k = 0; k < n.names.size(); ++k) scope->vars[n.names[k]] = (*v.a)[k];
  }

  // Out of line (as assign and call_block): inlined, their locals would sit in every statement's stack frame.
  [[gnu::noinline]] void exec_for(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow) {
    const Value seq = eval(*n.kids[0], scope);
    Array items;
    switch (seq.kind) {
      case K::kArray:
        charge(n, seq);
        items = *seq.a;
        break;
      case K::kObject:
        charge(n, seq);
        for (const auto& [k, v] : *seq.o) items.push_back(Value::string(k));
        break;
      case K::kString:
        for (size_t i = 0; i < seq.str().size();) {
          count_iteration(n);
          size_t len = 1;
          const auto c = static_cast<unsigned char>(seq.str()[i]);
          if (c >= 0xF0) len = 4;
          else if (c >= 0xE0) len = 3;
          else if (c >= 0xC0) len = 2;
          items.push_back(Value::string(seq.str().substr(i, len)));
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
      body_scope->vars["loop"] = loop_object(items, i);
      Flow f = Flow::kNormal;
      exec_block(n.body, body_scope, out, &f);
      if (f == Flow::kBreak) break;
    }
    (void)flow;
  }

  [[gnu::noinline]] static Value loop_object(const Array& items, int64_t i) {
    const auto len = static_cast<int64_t>(items.size());
    Object o;
    o.reserve(9);
    o.emplace_back("index", Value::integer(i + 1));
    o.emplace_back("index0", Value::integer(i));
    o.emplace_back("revindex", Value::integer(len - i));
    o.emplace_back("revindex0", Value::integer(len - i - 1));
    o.emplace_back("first", Value::boolean(i == 0));
    o.emplace_back("last", Value::boolean(i == len - 1));
    o.emplace_back("length", Value::integer(len));
    o.emplace_back("previtem", i > 0 ? items[i - 1] : Value());
    o.emplace_back("nextitem", i + 1 < len ? items[i + 1] : Value());
    return Value::object(std::move(o));
  }

  void count_iteration(const Node& n) {
    if (++iterations_ > limits_.max_loop_iterations)
      error(n, fmt::format("more than {} loop iterations", limits_.max_loop_iterations));
  }

  // A macro sees the scope it was defined in. It holds that scope weakly: the scope holds the macro, and a
  // strong reference both ways would never be freed.
  Value make_macro(const Node& n, const ScopePtr& scope) {
    const Node* def = &n;
    std::weak_ptr<Scope> weak = scope;
    return Value::function([this, def, weak](const CallArgs& args) -> Value {
      const ScopePtr closure = weak.lock();
      if (!closure) error(*def, "macro called after the block that defined it ended");
      if (++depth_ > limits_.max_call_depth) {
        --depth_;
        error(*def, fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
      }
      auto s = std::make_shared<Scope>();
      s->parent = closure;
      std::string out;
      Flow f = Flow::kNormal;
      try {
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
    Nesting guard(*this, n);
    Value v = eval_node(n, scope);
    // What builds new strings and lists pays for them (a variable or a literal is shared, not copied).
    if (n.kind == NK::kBinary || n.kind == NK::kFilter || n.kind == NK::kCall || n.kind == NK::kSlice) charge(n, v);
    return v;
  }

  Value eval_node(const Node& n, const ScopePtr& scope) {
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
        if (v.kind == K::kInt && v.i == INT64_MIN) error(n, "integer overflow");
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
          d.set(key.str(), eval(*n.kids[k + 1], scope));
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
          const std::optional<int64_t> v = whole(a.positional[k]);
          if (!v) error(n, "range() needs integers");
          return *v;
        };
        if (a.positional.size() == 1) stop = num(0);
        else if (a.positional.size() >= 2) start = num(0), stop = num(1);
        if (a.positional.size() >= 3) step = num(2);
        if (step == 0) error(n, "range() step must not be zero");
        Array out;
        for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
          count_iteration(n);
          out.push_back(Value::integer(static_cast<int64_t>(i)));
        }
        return Value::array(std::move(out));
      });
    }
    if (name == "raise_exception") {
      return Value::function([this, &n](const CallArgs& a) -> Value {
        error(n, "raise_exception: " + (a.positional.empty() ? std::string() : text(a.positional[0])));
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

  // A bound dict method: the function Value carries its dict in `o` (so a cycle check sees it), the function
  // itself holds the dict weakly.
  Value dict_method(const Value& obj, const std::string& name) {
    const std::weak_ptr<Object> weak = obj.o;
    Value f;
    if (name == "items" || name == "keys" || name == "values") {
      f = Value::function([weak, name](const CallArgs&) {
        Array out;
        if (const auto o = weak.lock()) {
          for (const auto& [k, v] : *o) {
            if (name == "items") out.push_back(Value::array({Value::string(k), v}));
            else if (name == "keys") out.push_back(Value::string(k));
            else out.push_back(v);
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

  Value string_method(const Node& n, const Value& obj, const std::string& name) {
    const std::shared_ptr<const std::string> sp = obj.s;
    const auto arg_string = [&n, name](const CallArgs& a, size_t k) -> const std::string& {
      if (k >= a.positional.size() || !a.positional[k].is_string())
        error(n, fmt::format("str.{}() needs a string argument", name));
      return a.positional[k].str();
    };
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return Value::function([sp, starts, arg_string](const CallArgs& a) {
        const std::string& p = arg_string(a, 0);
        return Value::boolean(starts ? sp->starts_with(p) : sp->ends_with(p));
      });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return Value::function([sp, l, r](const CallArgs& a) {
        return Value::string(strip_chars(*sp, a.positional.empty() ? nullptr : &a.positional[0], l, r));
      });
    }
    if (name == "upper") return Value::function([sp](const CallArgs&) { return Value::string(ascii_upper(*sp)); });
    if (name == "lower") return Value::function([sp](const CallArgs&) { return Value::string(ascii_lower(*sp)); });
    if (name == "title" || name == "capitalize") {
      const bool title = name == "title";
      return Value::function([sp, title](const CallArgs&) {
        std::string out = title ? *sp : ascii_lower(*sp);
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
      return Value::function([this, &n, sp](const CallArgs& a) {
        const Value* sep = a.positional.empty() ? a.kw("sep") : &a.positional[0];
        const Value* mx = a.positional.size() > 1 ? &a.positional[1] : a.kw("maxsplit");
        if (sep && !sep->is_string() && !sep->is_none() && !sep->is_undefined()) error(n, "str.split() needs a string");
        const std::optional<int64_t> m = mx ? whole(*mx) : std::nullopt;
        Value parts = split(*sp, sep, m.value_or(-1));
        charge(n, parts.a->size() * sizeof(Value));
        return parts;
      });
    }
    if (name == "replace") {
      return Value::function([this, &n, sp, arg_string](const CallArgs& a) {
        const int64_t count = a.positional.size() > 2 ? whole(a.positional[2]).value_or(-1) : -1;
        auto r = replace_all(*sp, arg_string(a, 0), arg_string(a, 1), limits_.max_output_bytes, count);
        if (!r) error(n, fmt::format("str.replace() makes a string longer than {} bytes", limits_.max_output_bytes));
        return Value::string(std::move(*r));
      });
    }
    if (name == "join") {
      return Value::function([this, sp, &n](const CallArgs& a) {
        if (a.positional.empty() || !a.positional[0].is_array()) error(n, "str.join() needs a list");
        return join(n, *a.positional[0].a, *sp, nullptr);
      });
    }
    if (name == "length") return Value::integer(utf8_length(*sp));
    return Value();
  }

  // The items' texts (or their `attr`) with `sep` between them, refused past max_output_bytes.
  Value join(const Node& n, const Array& items, const std::string& sep, const Value* attr) {
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out += sep;
      out += text(attr ? attribute(n, items[k], text(*attr)) : items[k]);
      if (out.size() > limits_.max_output_bytes)
        error(n, fmt::format("join makes a string longer than {} bytes", limits_.max_output_bytes));
    }
    return Value::string(std::move(out));
  }

  static int64_t norm_index(int64_t i, int64_t len) { return i < 0 ? i + len : i; }

  Value index(const Node& n, const Value& obj, const Value& key) {
    if (obj.is_array() && key.is_number()) {
      const auto len = static_cast<int64_t>(obj.a->size());
      const std::optional<int64_t> k = whole(key);
      if (!k) return Value();
      const int64_t i = norm_index(*k, len);
      return i >= 0 && i < len ? (*obj.a)[i] : Value();
    }
    if (obj.is_mapping() && key.is_string()) return attribute(n, obj, key.str());
    if (obj.is_string() && key.is_number()) {
      const auto len = static_cast<int64_t>(obj.str().size());
      const std::optional<int64_t> k = whole(key);
      if (!k) return Value();
      const int64_t i = norm_index(*k, len);
      return i >= 0 && i < len ? Value::string(obj.str().substr(i, 1)) : Value();
    }
    if (obj.is_string() && key.is_string()) return attribute(n, obj, key.str());
    if (obj.is_undefined()) error(n, "subscript of an undefined value");
    return Value();
  }

  Value slice(const Node& n, const ScopePtr& scope) {
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
      if (obj.is_array()) items.push_back((*obj.a)[static_cast<size_t>(i)]);
      else str += obj.str()[static_cast<size_t>(i)];
    }
    return obj.is_array() ? Value::array(std::move(items)) : Value::string(std::move(str));
  }

  bool contains(const Node& n, const Value& haystack, const Value& needle) {
    if (haystack.is_string() && needle.is_string()) return haystack.str().find(needle.str()) != std::string::npos;
    if (haystack.is_array())
      return std::any_of(haystack.a->begin(), haystack.a->end(), [&](const Value& x) { return same(x, needle); });
    if (haystack.is_mapping() && needle.is_string()) return haystack.get(needle.str()) != nullptr;
    if (haystack.is_undefined() || haystack.is_none()) return false;
    error(n, fmt::format("'in' on a {}", haystack.type_name()));
  }

  Value binary(const Node& n, const ScopePtr& scope) {
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
    }
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
    if (t == "lower") return v.is_string() && ascii_lower(v.str()) == v.str();
    if (t == "upper") return v.is_string() && ascii_upper(v.str()) == v.str();
    if (t == "equalto" || t == "eq" || t == "sameas") {
      if (n.kids.size() < 2) error(n, fmt::format("'{}' test needs a value", t));
      return same(v, eval(*n.kids[1], scope));
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
    if (f == "trim") return Value::string(strip_chars(text(v), arg(0, "chars"), true, true));
    if (f == "length" || f == "count") {
      if (v.is_string()) return Value::integer(utf8_length(v.str()));
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
    if (f == "upper") return Value::string(ascii_upper(text(v)));
    if (f == "lower") return Value::string(ascii_lower(text(v)));
    if (f == "string") return v.is_string() ? v : Value::string(text(v));
    if (f == "capitalize" || f == "title") return invoke(n, string_method(n, Value::string(text(v)), f), {});
    if (f == "replace") {
      const Value* from = arg(0, "old");
      const Value* to = arg(1, "new");
      if (!from || !to || !from->is_string() || !to->is_string()) error(n, "replace needs two strings");
      auto r = replace_all(text(v), from->str(), to->str(), limits_.max_output_bytes);
      if (!r) error(n, fmt::format("replace makes a string longer than {} bytes", limits_.max_output_bytes));
      return Value::string(std::move(*r));
    }
    if (f == "tojson") {
      const Value* indent = arg(0, "indent");
      const int64_t width = indent ? whole(*indent).value_or(0) : 0;
      if (width < 0 || width > 64) error(n, "tojson: indent must be between 0 and 64");
      return Value::string(to_json(v, static_cast<int>(width), limits_.max_output_bytes));
    }
    if (f == "int") {
      if (v.is_number()) {
        const double d = std::trunc(v.as_double());
        if (v.kind == K::kInt) return v;
        if (!(std::fabs(d) < 9.2e18)) error(n, "int() of a float out of range");
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
    if (f == "float")
      return Value::number(v.is_number() ? v.as_double() : v.is_string() ? std::atof(v.str().c_str()) : 0.0);
    if (f == "abs") {
      if (!v.is_number()) error(n, "abs of a non-number");
      if (v.kind == K::kInt && v.i == INT64_MIN) error(n, "integer overflow in abs");
      return v.kind == K::kInt ? Value::integer(v.i < 0 ? -v.i : v.i) : Value::number(std::fabs(v.f));
    }
    if (f == "items") {
      if (v.kind != K::kObject) error(n, fmt::format("items of a {}", v.type_name()));
      return invoke(n, dict_method(v, "items"), {});
    }
    if (f == "indent") {
      const Value* width = arg(0, "width");
      const Value* first = arg(1, "first");
      const int64_t w = width ? whole(*width).value_or(4) : 4;
      if (w < 0 || static_cast<uint64_t>(w) > limits_.max_output_bytes) error(n, "indent width out of range");
      const std::string pad(static_cast<size_t>(w), ' ');
      std::string s = text(v), out = first && first->truthy() ? pad : "";
      for (size_t k = 0; k < s.size(); ++k) {
        out += s[k];
        if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') {
          out += pad;
          if (out.size() > limits_.max_output_bytes)
            error(n, fmt::format("indent makes a string longer than {} bytes", limits_.max_output_bytes));
        }
      }
      return Value::string(out);
    }
    // List filters.
    Array items;
    if (v.is_array()) {
      charge(n, v);
      items = *v.a;
    } else if (v.is_string()) {
      for (char c : v.str()) {
        count_iteration(n);
        items.push_back(Value::string(std::string(1, c)));
      }
    } else if (v.kind == K::kObject) {
      charge(n, v);
      for (const auto& [k, x] : *v.o) items.push_back(Value::string(k));
    } else if (!v.is_undefined() && !v.is_none()) {
      error(n, fmt::format("filter '{}' on a {}", f, v.type_name()));
    }
    if (f == "list") return Value::array(items);
    if (f == "first") return items.empty() ? Value() : items.front();
    if (f == "last") return items.empty() ? Value() : items.back();
    if (f == "reverse") return Value::array(Array(items.rbegin(), items.rend()));
    if (f == "join") {
      const Value* sep = arg(0, "d");
      return join(n, items, sep ? text(*sep) : std::string(), arg(1, "attribute"));
    }
    if (f == "unique") {
      Array out;
      for (const Value& x : items) {
        bool seen = false;
        for (const Value& y : out) {
          count_iteration(n);  // quadratic: each comparison counts
          if ((seen = same(x, y))) break;
        }
        if (!seen) out.push_back(x);
      }
      return Value::array(std::move(out));
    }
    if (f == "sum") {
      Value total = Value::integer(0);
      for (const Value& x : items) {
        if (!x.is_number()) error(n, "sum of a non-number");
        if (total.kind == K::kInt && x.kind == K::kInt) {
          const std::optional<int64_t> s = int_op("+", total.i, x.i);
          if (!s) error(n, "integer overflow in sum");
          total = Value::integer(*s);
        } else {
          total = Value::number(total.as_double() + x.as_double());
        }
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
        const Value field = x.is_mapping() ? (x.get(attr->str()) ? *x.get(attr->str()) : Value()) : Value();
        bool ok;
        if (!test_name) {
          ok = field.truthy();
        } else {
          const std::string t = text(*test_name);
          if (t == "defined") ok = !field.is_undefined();
          else if (t == "undefined") ok = field.is_undefined();
          else if (t == "none") ok = field.is_none();
          else if (t == "equalto" || t == "eq" || t == "==") ok = test_arg && same(field, *test_arg);
          else if (t == "ne" || t == "!=") ok = !(test_arg && same(field, *test_arg));
          else if (t == "string") ok = field.is_string();
          else if (t == "true") ok = field.kind == K::kBool && field.b;
          else if (t == "false") ok = field.kind == K::kBool && !field.b;
          else if (t == "in") ok = test_arg && test_arg->is_array() && contains(n, *test_arg, field);
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
          Value field = attribute(n, x, text(*attr));
          out.push_back(field.is_undefined() && dflt ? *dflt : field);
        }
      } else if (!a.positional.empty() && a.positional[0].is_string()) {
        // map('upper') etc.: apply a one-argument filter by name.
        Node call = {};
        call.kind = NK::kFilter;
        call.line = n.line;
        call.column = n.column;
        call.str = a.positional[0].str();
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
  int64_t work_ = 0;
  int depth_ = 0;
  int nesting_ = 0;
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
