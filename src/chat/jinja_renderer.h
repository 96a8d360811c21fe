// The Jinja renderer's internals, shared by its translation units: statements (jinja_renderer.cpp),
// expressions (jinja_eval.cpp), str/dict methods (jinja_methods.cpp), and the filter and test tables
// (jinja_filters.cpp, jinja_tests.cpp). Not part of the chat/ interface: include jinja_template.h instead.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_template.h"

namespace kvik::jinja {

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

// One render: walks the syntax tree, and accounts for everything a template could make expensive (nesting,
// loop iterations, bytes built, macro depth) against the Limits.
class Renderer {
 public:
  explicit Renderer(const Limits& limits) : limits_(limits) {}

  [[noreturn]] static void error(const Node& n, const std::string& what) {
    throw TemplateError(what, n.line, n.column);
  }
  const Limits& limits() const { return limits_; }

  // Statements (jinja_renderer.cpp).
  void exec_block(const std::vector<NodePtr>& stmts, const ScopePtr& scope, std::string& out, Flow* flow);

  // Expressions (jinja_eval.cpp).
  Value eval(const Node& n, const ScopePtr& scope);
  Value attribute(const Node& n, const Value& obj, const std::string& name);
  Value invoke(const Node& at, const Value& callee, const CallArgs& args);
  bool contains(const Node& n, const Value& haystack, const Value& needle);
  // Python's == within the render's work budget.
  bool same(const Value& x, const Value& y);

  // Methods of str and dict values (jinja_methods.cpp): a function Value bound to `obj`, or undefined.
  Value string_method(const Node& n, const Value& obj, const std::string& name);
  static Value dict_method(const Value& obj, const std::string& name);
  // The items' texts (or their `attr`) with `sep` between them, refused past max_output_bytes.
  Value join(const Node& n, const Array& items, const std::string& sep, const Value* attr);

  // Accounting. Every string and list a render builds or copies is paid for with charge(), so a hostile
  // template's time is bounded; count_iteration() bounds loops.
  void charge(const Node& at, size_t bytes);
  void charge(const Node& at, const Value& v);
  void count_iteration(const Node& n);
  Value make_string(const Node& at, std::string s);
  // How a value prints, at most max_output_bytes.
  std::string text(const Value& v) const { return v.to_output(limits_.max_output_bytes); }

 private:
  // Recursion through statements, expressions and macro calls together; with the parser's bound on each
  // template's nesting it keeps a render's stack small whatever the template does.
  static constexpr int kMaxNesting = 500;
  struct Nesting {
    Renderer& r;
    Nesting(Renderer& r, const Node& at);
    ~Nesting() { --r.nesting_; }
  };

  void emit(const Node& at, std::string& out, const std::string& s);
  void exec(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow);
  void exec_node(const Node& n, const ScopePtr& scope, std::string& out, Flow* flow);
  void call_block(const Node& n, const ScopePtr& scope, std::string& out);
  int depth_of(const Node& at, const Value& v, const Object* into, std::unordered_map<const void*, int>& seen);
  void assign(const Node& n, const ScopePtr& scope, Value v);
  void exec_for(const Node& n, const ScopePtr& scope, std::string& out);
  Array loop_items(const Node& n, const Value& seq);
  static Value loop_object(const Array& items, int64_t i);
  Value make_macro(const Node& n, const ScopePtr& scope);
  Value call_macro(const Node& def, const ScopePtr& closure, const CallArgs& args);

  Value eval_node(const Node& n, const ScopePtr& scope);
  CallArgs eval_args(const Node& call, const ScopePtr& scope);
  Value unary(const Node& n, const ScopePtr& scope);
  Value collection(const Node& n, const ScopePtr& scope);
  Value global(const Node& n, const std::string& name);
  Value range(const Node& n, const CallArgs& a);
  Value index(const Node& n, const Value& obj, const Value& key);
  Value slice(const Node& n, const ScopePtr& scope);
  Value binary(const Node& n, const ScopePtr& scope);
  Value arithmetic(const Node& n, const std::string& op, const Value& l, const Value& r);
  Value test(const Node& n, const ScopePtr& scope);
  Value filter(const Node& n, const ScopePtr& scope);

  const Limits& limits_;
  int64_t iterations_ = 0;
  int64_t work_ = 0;
  int depth_ = 0;
  int nesting_ = 0;
};

// Filters: `value | name(args)`. `at` is the filter's node (errors carry its place), `name` the filter's name.
struct FilterCall {
  const Node& at;
  std::string_view name;
  const Value& value;
  const CallArgs& args;
  // Positional argument k, else the keyword `kw` (when not null); nullptr when neither was given.
  const Value* arg(size_t k, const char* kw) const {
    if (k < args.positional.size()) return &args.positional[k];
    return kw ? args.kw(kw) : nullptr;
  }
};
using FilterFn = Value (*)(Renderer& r, const FilterCall& call);
// The filter of that name, nullptr when there is none.
FilterFn find_filter(std::string_view name);

// Tests: `value is name arg`, and the tests selectattr/rejectattr/select/reject apply, from this one table.
struct TestDef {
  bool (*of_value)(const Value& v) = nullptr;  // a test of the value alone (defined, string, ...), or
  bool (*fn)(Renderer& r, const Node& at, std::string_view name, const Value& v, const Value* arg) = nullptr;
  bool needs_arg = false;  // equalto, ne, in: the test compares against a value
};
// The test of that name, nullptr when there is none.
const TestDef* find_test(std::string_view name);
// Every test name, for tests of the table itself.
std::vector<std::string_view> test_names();
// Applies test `name` to v (arg: its argument, nullptr when none given); errors name the test and the place.
bool apply_test(Renderer& r, const Node& at, std::string_view name, const Value& v, const Value* arg);

}  // namespace kvik::jinja
