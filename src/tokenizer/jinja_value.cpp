#include "tokenizer/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer::jinja {

Value make_object(std::vector<std::pair<std::string, Value>> items, bool is_namespace) {
  Value v;
  v.kind = Value::Kind::Object;
  v.object = std::make_shared<ObjectMap>();
  v.object->items = std::move(items);
  v.is_namespace = is_namespace;
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return of(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return of(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return of(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = j.get<double>();
      // JavaScript has one number type: integral values are IntegerValue in @huggingface/jinja.
      if (std::trunc(d) == d && std::fabs(d) < 9e15) return of(static_cast<int64_t>(d));
      return of_float(d);
    }
    case nlohmann::ordered_json::value_t::string: return of(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> a;
      for (const auto& e : j) a.push_back(from_json(e));
      return of(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return make_object(std::move(items));
    }
    default: return Value();
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return boolean;
    case Kind::Int: return integer != 0;
    case Kind::Float: return number != 0 && !std::isnan(number);
    case Kind::String: return !string.empty();
    case Kind::Array: return !array->empty();
    case Kind::Object: return true;
    case Kind::Function: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "none";
    case Kind::Bool: return "boolean";
    case Kind::Int: return "integer";
    case Kind::Float: return "float";
    case Kind::String: return "string";
    case Kind::Array: return "list";
    case Kind::Object: return is_namespace ? "namespace" : "object";
    case Kind::Function: return "function";
  }
  return "?";
}

namespace {
std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (std::trunc(d) == d && std::fabs(d) < 1e21) return fmt::format("{:.0f}", d);
  return fmt::format("{}", d);
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      default: break;
    }
    if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
      ++i;
      continue;
    }
    if (c < 0x7F || !ensure_ascii) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const char32_t cp = utf8_valid_length(s, i) ? utf8_next(s, i) : (++i, U'\uFFFD');
    if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
  }
  return out + "\"";
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& o, int depth, bool undefined_to_null) {
  const std::string item_sep = !o.item_sep.empty() ? o.item_sep : (o.indent > 0 ? "," : ", ");
  const std::string key_sep = !o.key_sep.empty() ? o.key_sep : ": ";
  switch (v.kind) {
    case Value::Kind::None: return "null";
    case Value::Kind::Undefined: return undefined_to_null ? "null" : "undefined";
    case Value::Kind::Bool: return v.boolean ? "true" : "false";
    case Value::Kind::Int: return std::to_string(v.integer);
    case Value::Kind::Float: return js_number(v.number);
    case Value::Kind::String: return json_string(v.string, o.ensure_ascii);
    case Value::Kind::Function: throw std::runtime_error("Cannot convert to JSON: FunctionValue");
    case Value::Kind::Array:
    case Value::Kind::Object: {
      const std::string indent = o.indent > 0 ? std::string(static_cast<size_t>(o.indent), ' ') : "";
      std::string base = "\n";
      for (int d = 0; d < depth; ++d) base += indent;
      const std::string child = base + indent;
      std::vector<std::string> core;
      if (v.kind == Value::Kind::Array) {
        for (const Value& e : *v.array) core.push_back(to_json(e, o, depth + 1, undefined_to_null));
      } else {
        auto items = v.object->items;
        if (o.sort_keys)
          std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [k, e] : items) {
          std::string entry = json_string(k, o.ensure_ascii) + key_sep + to_json(e, o, depth + 1, undefined_to_null);
          core.push_back(o.indent > 0 ? child + entry : entry);
        }
      }
      std::string joined;
      const bool arr = v.kind == Value::Kind::Array;
      for (size_t i = 0; i < core.size(); ++i) {
        if (i) joined += item_sep;
        if (arr && o.indent > 0) joined += child;
        joined += core[i];
      }
      if (o.indent > 0 && !core.empty()) return arr ? "[" + joined + base + "]" : "{" + joined + base + "}";
      return arr ? "[" + joined + "]" : "{" + joined + "}";
    }
  }
  return "";
}

std::string Value::to_string() const {
  switch (kind) {
    case Kind::Undefined: case Kind::None: return "";
    case Kind::Bool: return boolean ? "true" : "false";
    case Kind::Int: return std::to_string(integer);
    case Kind::Float:
      if (number == 0 && std::signbit(number)) return "-0.0";
      if (std::trunc(number) == number && std::fabs(number) < 1e21) return fmt::format("{:.1f}", number);
      return js_number(number);
    case Kind::String: return string;
    case Kind::Array: case Kind::Object: return to_json(*this, JsonOptions{}, 0, false);
    case Kind::Function: return "[function]";
  }
  return "";
}

}  // namespace latentserve::tokenizer::jinja
