#include "chat/jinja_value.h"

#include <charconv>
#include <cmath>

namespace kvik::jinja {

const Value* CallArgs::kw(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0;
    case Kind::kString: return !s.empty();
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

void json_into(const Value& v, int indent, int depth, std::string& out) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone: out += "null"; return;
    case K::kBool: out += v.b ? "true" : "false"; return;
    case K::kInt: out += std::to_string(v.i); return;
    case K::kFloat: out += js_number(v.f); return;
    case K::kString: json_string(v.s, out); return;
    case K::kFunction: out += "null"; return;
    default: break;
  }
  const bool arr = v.kind == K::kArray;
  const size_t n = arr ? v.a->size() : v.o->size();
  out += arr ? '[' : '{';
  if (n == 0) {
    out += arr ? ']' : '}';
    return;
  }
  std::string pad_in, pad_out;
  if (indent > 0) {
    pad_out.push_back('\n');
    pad_out.append(static_cast<size_t>(indent) * depth, ' ');
    pad_in = pad_out;
    pad_in.append(static_cast<size_t>(indent), ' ');
  }
  for (size_t k = 0; k < n; ++k) {
    if (k > 0) out += indent > 0 ? "," : ", ";
    out += pad_in;
    if (arr) {
      json_into((*v.a)[k], indent, depth + 1, out);
    } else {
      json_string((*v.o)[k].first, out);
      out += ": ";
      json_into((*v.o)[k].second, indent, depth + 1, out);
    }
  }
  out += pad_out;
  out += arr ? ']' : '}';
}

}  // namespace

std::string to_json(const Value& v, int indent, int depth) {
  std::string out;
  json_into(v, indent, depth, out);
  return out;
}

std::string Value::to_output() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone: return "";
    case Kind::kBool: return b ? "true" : "false";
    case Kind::kInt: return std::to_string(i);
    case Kind::kFloat: return f == std::floor(f) && std::fabs(f) < 1e21 ? js_number(f) + ".0" : js_number(f);
    case Kind::kString: return s;
    case Kind::kFunction: return "[function]";
    default: return to_json(*this);
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

bool equals(const Value& x, const Value& y) {
  using K = Value::Kind;
  if (x.is_number() && y.is_number()) return x.as_double() == y.as_double();
  if (x.kind == K::kBool && y.is_number()) return (x.b ? 1.0 : 0.0) == y.as_double();
  if (y.kind == K::kBool && x.is_number()) return (y.b ? 1.0 : 0.0) == x.as_double();
  if (x.kind != y.kind) return (x.is_none() || x.is_undefined()) && (y.is_none() || y.is_undefined());
  switch (x.kind) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kBool: return x.b == y.b;
    case K::kString: return x.s == y.s;
    case K::kArray: return x.a == y.a;
    case K::kObject:
    case K::kNamespace: return x.o == y.o;
    case K::kFunction: return x.fn == y.fn;
    default: return false;
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: {
      // JSON.parse gives JS numbers; the reference treats integral ones as integers.
      const double d = j.get<double>();
      if (d == std::floor(d) && std::fabs(d) < 9e15) return Value::integer(static_cast<int64_t>(d));
      return Value::number(d);
    }
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(from_json(e));
      return Value::array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.emplace_back(it.key(), from_json(it.value()));
      return Value::object(std::move(o));
    }
    default: return Value();
  }
}

}  // namespace kvik::jinja
