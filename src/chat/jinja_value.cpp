#include "chat/jinja_value.h"

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace kvik::jinja {

const Value* CallArgs::kw(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

const std::string& Value::str() const {
  static const std::string kEmpty;
  return kind == Kind::kString ? *s : kEmpty;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0;
    case Kind::kString: return !s->empty();
    case Kind::kArray: return !a->empty();
    case Kind::kObject: return !o->empty();
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

const Value* Value::get(std::string_view key) const {
  if (!is_mapping()) return nullptr;
  for (const auto& [k, v] : *o)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *o)
    if (k == key) {
      old = std::move(v);
      return;
    }
  o->emplace_back(key, std::move(v));
}

namespace {

// JavaScript's Number.prototype.toString for a double (shortest round trip), which the reference uses.
std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == std::floor(d) && std::fabs(d) < 1e21) {
    char buf[32];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed, 0);
    return std::string(buf, p);
  }
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, p);
  // to_chars writes "1e-07"; JS writes "1e-7".
  const size_t e = s.find('e');
  if (e != std::string::npos) {
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp.erase(0, 1);
    while (exp.size() > 1 && exp[0] == '0') exp.erase(0, 1);
    s = mant + "e" + sign + exp;
  }
  return s;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  size_t max_bytes;
  std::string out;

  void check() const {
    if (out.size() > max_bytes) fail("value is too large to print: more than {} bytes of JSON", max_bytes);
  }

  void value(const Value& v, int depth) {
    using K = Value::Kind;
    switch (v.kind) {
      case K::kUndefined:
      case K::kNone: out += "null"; return;
      case K::kBool: out += v.b ? "true" : "false"; return;
      case K::kInt: out += std::to_string(v.i); return;
      case K::kFloat: out += js_number(v.f); return;
      case K::kString:
        json_string(*v.s, out);
        check();
        return;
      case K::kFunction: out += "null"; return;
      default: break;
    }
    if (depth > 8 * kMaxValueDepth) fail("value nests too deep to print");  // stores are checked: a backstop
    const bool arr = v.kind == K::kArray;
    const size_t n = arr ? v.a->size() : v.o->size();
    out += arr ? '[' : '{';
    if (n == 0) {
      out += arr ? ']' : '}';
      return;
    }
    const size_t pad = indent > 0 ? static_cast<size_t>(indent) * static_cast<size_t>(depth + 1) : 0;
    if (pad > max_bytes) fail("value is too large to print: more than {} bytes of JSON", max_bytes);
    for (size_t k = 0; k < n; ++k) {
      if (k > 0) out += indent > 0 ? "," : ", ";
      if (indent > 0) {
        out += '\n';
        out.append(pad, ' ');
      }
      if (arr) {
        value((*v.a)[k], depth + 1);
      } else {
        json_string((*v.o)[k].first, out);
        out += ": ";
        value((*v.o)[k].second, depth + 1);
      }
      check();
    }
    if (indent > 0) {
      out += '\n';
      out.append(pad - static_cast<size_t>(indent), ' ');
    }
    out += arr ? ']' : '}';
  }
};

// Both JSON flavours (ordered and sorted keys) into a Value, refusing what nests deeper than kMaxValueDepth.
template <typename Json>
Value value_of(const Json& j, int depth) {
  if (j.is_structured() && depth >= kMaxValueDepth)
    fail("chat template input nests deeper than {} levels of lists and objects", kMaxValueDepth);
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned: return Value::integer(static_cast<int64_t>(j.template get<uint64_t>()));
    case Json::value_t::number_float: {
      // JSON.parse gives JS numbers; the reference treats integral ones as integers.
      const double d = j.template get<double>();
      if (d == std::floor(d) && std::fabs(d) < 9e15) return Value::integer(static_cast<int64_t>(d));
      return Value::number(d);
    }
    case Json::value_t::string: return Value::string(j.template get<std::string>());
    case Json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(value_of(e, depth + 1));
      return Value::array(std::move(a));
    }
    case Json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.emplace_back(it.key(), value_of(it.value(), depth + 1));
      return Value::object(std::move(o));
    }
    default: return Value();
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, size_t max_bytes) {
  JsonWriter w{indent, max_bytes, {}};
  w.value(v, 0);
  return std::move(w.out);
}

std::string Value::to_output(size_t max_bytes) const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone: return "";
    case Kind::kBool: return b ? "true" : "false";
    case Kind::kInt: return std::to_string(i);
    case Kind::kFloat: return f == std::floor(f) && std::fabs(f) < 1e21 ? js_number(f) + ".0" : js_number(f);
    case Kind::kString: return *s;
    case Kind::kFunction: return "[function]";
    default: return to_json(*this, 0, max_bytes);
  }
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

bool equals(const Value& x, const Value& y, int64_t* work) {
  using K = Value::Kind;
  if (work && --*work < 0) fail("chat template: comparing values takes too long");
  if (x.is_number() && y.is_number()) return x.as_double() == y.as_double();
  if (x.kind == K::kBool && y.is_number()) return (x.b ? 1.0 : 0.0) == y.as_double();
  if (y.kind == K::kBool && x.is_number()) return (y.b ? 1.0 : 0.0) == x.as_double();
  if (x.kind != y.kind) return (x.is_none() || x.is_undefined()) && (y.is_none() || y.is_undefined());
  switch (x.kind) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kBool: return x.b == y.b;
    case K::kString: return *x.s == *y.s;
    case K::kArray:
      if (x.a == y.a) return true;
      if (x.a->size() != y.a->size()) return false;
      for (size_t k = 0; k < x.a->size(); ++k)
        if (!equals((*x.a)[k], (*y.a)[k], work)) return false;
      return true;
    case K::kObject: {
      if (x.o == y.o) return true;
      if (x.o->size() != y.o->size()) return false;
      for (const auto& [key, xv] : *x.o) {  // Python dicts compare regardless of order
        const Value* yv = y.get(key);
        if (!yv || !equals(xv, *yv, work)) return false;
      }
      return true;
    }
    case K::kNamespace: return x.o == y.o;
    case K::kFunction: return x.fn == y.fn;
    default: return false;
  }
}

Value from_json(const nlohmann::ordered_json& j) { return value_of(j, 0); }
Value from_json(const nlohmann::json& j) { return value_of(j, 0); }

}  // namespace kvik::jinja
