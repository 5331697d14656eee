#pragma once
// Runtime values of the Jinja interpreter (jinja.cpp), with @huggingface/jinja semantics.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace latentserve::tokenizer::jinja {

struct Value;
struct ObjectMap;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(const Args&, const Kwargs&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Function };
  Kind kind = Kind::Undefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::shared_ptr<std::vector<Value>> array;
  std::shared_ptr<ObjectMap> object;
  bool is_namespace = false;
  std::shared_ptr<Function> function;

  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value of(bool b) { Value v; v.kind = Kind::Bool; v.boolean = b; return v; }
  static Value of(int64_t i) { Value v; v.kind = Kind::Int; v.integer = i; return v; }
  static Value of_float(double d) { Value v; v.kind = Kind::Float; v.number = d; return v; }
  static Value of(std::string s) { Value v; v.kind = Kind::String; v.string = std::move(s); return v; }
  static Value of(std::vector<Value> a) {
    Value v; v.kind = Kind::Array; v.array = std::make_shared<std::vector<Value>>(std::move(a)); return v;
  }
  static Value of(Function f) { Value v; v.kind = Kind::Function; v.function = std::make_shared<Function>(std::move(f)); return v; }
  static Value from_json(const nlohmann::ordered_json& j);

  bool is(Kind k) const { return kind == k; }
  bool numeric() const { return kind == Kind::Int || kind == Kind::Float; }
  double as_double() const { return kind == Kind::Int ? static_cast<double>(integer) : kind == Kind::Bool ? boolean : number; }
  bool truthy() const;
  std::string type_name() const;
  std::string to_string() const;  // what {{ }} prints
};

struct ObjectMap {
  std::vector<std::pair<std::string, Value>> items;  // insertion order
  const Value* find(const std::string& key) const {
    for (const auto& [k, v] : items)
      if (k == key) return &v;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& [k, old] : items)
      if (k == key) { old = std::move(v); return; }
    items.emplace_back(key, std::move(v));
  }
};

Value make_object(std::vector<std::pair<std::string, Value>> items, bool is_namespace = false);

struct JsonOptions {
  int indent = -1;  // -1: none
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_sep, key_sep;  // empty: defaults
};
std::string to_json(const Value& v, const JsonOptions& options, int depth = 0, bool undefined_to_null = true);

}  // namespace latentserve::tokenizer::jinja
