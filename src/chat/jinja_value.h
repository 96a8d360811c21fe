// Runtime values of the Jinja-subset engine: what templates compute with. Only data (none, bools, numbers,
// strings, lists, ordered dicts, namespaces) and the engine's own functions: a template from a model file
// reaches no file, process or object internals. Strings, lists and dicts are shared, so copying a Value is O(1);
// only namespaces change after they are made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvik::jinja {

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, as JSON.parse / Python dicts

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* kw(std::string_view name) const;
};
using Function = std::function<Value(const CallArgs&)>;

// Nesting of lists and dicts a render may hold (input JSON and values a template stores): recursion over a
// value (printing, comparing) stays this deep.
constexpr int kMaxValueDepth = 128;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // kString
  std::shared_ptr<Array> a;              // shared: lists and dicts have reference semantics, as in Python
  std::shared_ptr<Object> o;             // kObject and kNamespace; for a bound dict method (kFunction), its dict
  std::shared_ptr<Function> fn;

  static Value none() {
    Value v;
    v.kind = Kind::kNone;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::kBool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::kInt;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::kString;
    v.s = std::make_shared<const std::string>(std::move(x));
    return v;
  }
  static Value array(Array x = {}) {
    Value v;
    v.kind = Kind::kArray;
    v.a = std::make_shared<Array>(std::move(x));
    return v;
  }
  static Value object(Object x = {}, Kind k = Kind::kObject) {
    Value v;
    v.kind = k;
    v.o = std::make_shared<Object>(std::move(x));
    return v;
  }
  static Value function(Function f) {
    Value v;
    v.kind = Kind::kFunction;
    v.fn = std::make_shared<Function>(std::move(f));
    return v;
  }

  const std::string& str() const;  // the text of a kString, "" for any other kind

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_mapping() const { return kind == Kind::kObject || kind == Kind::kNamespace; }
  double as_double() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }

  bool truthy() const;
  // Dict lookup; nullptr when absent.
  const Value* get(std::string_view key) const;
  void set(const std::string& key, Value v);

  // How {{ value }} prints: none/undefined print nothing (callers check), bools "true"/"false", floats "1.0",
  // lists and dicts as JSON (the reference, @huggingface/jinja, does the same); throws Error past max_bytes.
  std::string to_output(size_t max_bytes = SIZE_MAX) const;
  std::string type_name() const;
};

// Python's ==: numbers by value (1 == 1.0 == true), lists and dicts element by element, namespaces and
// functions by identity. `work`, when given, is decremented per element compared; at zero it throws Error.
bool equals(const Value& x, const Value& y, int64_t* work = nullptr);

// JSON text, Python json.dumps style: ", " and ": " separators (indent > 0: "," and newlines), no ASCII escaping.
// Throws Error when the text would pass max_bytes.
std::string to_json(const Value& v, int indent = 0, size_t max_bytes = SIZE_MAX);

// Throws Error when `j` nests deeper than kMaxValueDepth.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

}  // namespace kvik::jinja
