// Statements of the Jinja renderer, the render's accounting, and Template (see jinja_renderer.h).
#include "chat/jinja_renderer.h"

#include <algorithm>

namespace kvik::jinja {

using K = Value::Kind;
using NK = Node::Kind;

Renderer::Nesting::Nesting(Renderer& r, const Node& at) : r(r) {
  if (++r.nesting_ > kMaxNesting) {
    --r.nesting_;
    error(at, fmt::format("template recursion deeper than {}", kMaxNesting));
  }
}

void Renderer::charge(const Node& at, size_t bytes) {
  work_ += static_cast<int64_t>(std::min<size_t>(bytes, INT64_MAX / 2));
  if (work_ > limits_.max_work_bytes)
    error(at, fmt::format("the template builds more than {} bytes of strings and lists", limits_.max_work_bytes));
}

void Renderer::charge(const Node& at, const Value& v) {
  if (v.is_string())
    charge(at, v.str().size());
  else if (v.is_array())
    charge(at, v.a->size() * sizeof(Value));
  else if (v.kind == K::kObject)
    charge(at, v.o->size() * sizeof(Value));
}

void Renderer::count_iteration(const Node& n) {
  if (++iterations_ > limits_.max_loop_iterations)
    error(n, fmt::format("more than {} loop iterations", limits_.max_loop_iterations));
}

Value Renderer::make_string(const Node& at, std::string s) {
  if (s.size() > limits_.max_output_bytes)
    error(at, fmt::format("a string longer than {} bytes", limits_.max_output_bytes));
  return Value::string(std::move(s));
}

bool Renderer::same(const Value& x, const Value& y) {
  int64_t budget = std::max<int64_t>(0, (limits_.max_work_bytes - work_) / 64);
  const int64_t before = budget;
  const bool r = equals(x, y, &budget);
  work_ += (before - budget) * 64;
  return r;
}

void Renderer::emit(const Node& at, std::string& out, const std::string& s) {
  if (out.size() + s.size() > limits_.max_output_bytes)
    error(at, fmt::format("output exceeds {} bytes", limits_.max_output_bytes));
  charge(at, s.size());
  out += s;
}

void Renderer::exec_block(const std::vector<NodePtr>& stmts, const ScopePtr& scope, std::string& out, Flow* flow) {
  for (const NodePtr& s : stmts) {
    exec(*s, scope, out, flow);
    if (*flow != Flow::kNormal) return;
  }
}

void Renderer::exec(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow) {
  Nesting guard(*this, n);
  try {
    exec_node(n, scope, out, flow);
  } catch (const TemplateError&) {
    throw;
  } catch (const Error& e) {  // from the value layer (printing, comparing, input depth): give it a place
    error(n, e.what());
  }
}

void Renderer::exec_node(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow) {
  switch (n.kind) {
    case NK::kText: emit(n, out, n.str); return;
    case NK::kOutput: emit(n, out, text(eval(*n.kids[0], scope))); return;
    case NK::kIf: exec_block(eval(*n.kids[0], scope).truthy() ? n.body : n.orelse, scope, out, flow); return;
    case NK::kFor: exec_for(n, scope, out); return;
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

// {% call(args) m(...) %}body{% endcall %}: m sees `caller()` rendering the body. Out of line (as assign and
// exec_for): inlined, their locals would sit in every statement's stack frame.
[[gnu::noinline]] void Renderer::call_block(const Node& n, const ScopePtr& scope, std::string& out) {
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
int Renderer::depth_of(const Node& at, const Value& v, const Object* into, std::unordered_map<const void*, int>& seen) {
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

[[gnu::noinline]] void Renderer::assign(const Node& n, const ScopePtr& scope, Value v) {
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

// What a for loop iterates: a list's items, a dict's keys, a string's characters (UTF-8), nothing for
// none/undefined.
Array Renderer::loop_items(const Node& n, const Value& seq) {
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
        if (c >= 0xF0)
          len = 4;
        else if (c >= 0xE0)
          len = 3;
        else if (c >= 0xC0)
          len = 2;
        items.push_back(Value::string(seq.str().substr(i, len)));
        i += len;
      }
      break;
    case K::kUndefined:
    case K::kNone: break;
    default: error(n, fmt::format("cannot loop over a {}", seq.type_name()));
  }
  return items;
}

[[gnu::noinline]] void Renderer::exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
  Array items = loop_items(n, eval(*n.kids[0], scope));
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
}

[[gnu::noinline]] Value Renderer::loop_object(const Array& items, int64_t i) {
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

// A macro sees the scope it was defined in. It holds that scope weakly: the scope holds the macro, and a
// strong reference both ways would never be freed.
Value Renderer::make_macro(const Node& n, const ScopePtr& scope) {
  const Node* def = &n;
  std::weak_ptr<Scope> weak = scope;
  return Value::function([this, def, weak](const CallArgs& args) -> Value {
    const ScopePtr closure = weak.lock();
    if (!closure) error(*def, "macro called after the block that defined it ended");
    if (++depth_ > limits_.max_call_depth) {
      --depth_;
      error(*def, fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
    }
    try {
      Value out = call_macro(*def, closure, args);
      --depth_;
      return out;
    } catch (...) {
      --depth_;
      throw;
    }
  });
}

// The macro's parameters bound from positional, then keyword arguments, then its defaults; its body rendered.
Value Renderer::call_macro(const Node& def, const ScopePtr& closure, const CallArgs& args) {
  auto s = std::make_shared<Scope>();
  s->parent = closure;
  for (size_t k = 0; k < def.names.size(); ++k) {
    const std::string& p = def.names[k];
    if (k < args.positional.size()) {
      s->vars[p] = args.positional[k];
    } else if (const Value* v = args.kw(p)) {
      s->vars[p] = *v;
    } else {
      s->vars[p] = Value();
      for (const auto& [name, expr] : def.kwargs)
        if (name == p) s->vars[p] = eval(*expr, closure);
    }
  }
  if (const Value* c = args.kw("caller")) s->vars["caller"] = *c;
  std::string out;
  Flow f = Flow::kNormal;
  exec_block(def.body, s, out, &f);
  return Value::string(std::move(out));
}

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
