#include "tokenizer/jinja.h"

#include <cmath>
#include <map>

#include "core/error.h"
#include "tokenizer/jinja_parse.h"
#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer {

using jinja::Args;
using jinja::Kwargs;
using jinja::Node;
using jinja::NodePtr;
using jinja::Value;
using Kind = Value::Kind;

namespace {

struct BreakSignal {};
struct ContinueSignal {};

// JavaScript String.prototype.trim* whitespace (what @huggingface/jinja's strip uses).
bool js_space(char32_t cp) { return (is_whitespace(cp) && cp != 0x85) || cp == 0xFEFF; }
std::string js_trim(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e) {
      size_t i = b;
      if (!js_space(utf8_next(s, i))) break;
      b = i;
    }
  if (right)
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!js_space(utf8_next(s, i))) break;
      e = start;
    }
  return s.substr(b, e - b);
}
// String length in UTF-16 code units (JavaScript's .length).
int64_t js_length(const std::string& s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) n += utf8_next(s, i) >= 0x10000 ? 2 : 1;
  return n;
}

class Scope {
 public:
  explicit Scope(Scope* parent = nullptr) : parent_(parent) {}
  Value lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent_) {
      auto it = s->vars_.find(name);
      if (it != s->vars_.end()) return it->second;
    }
    return Value();
  }
  void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

 private:
  Scope* parent_;
  std::map<std::string, Value> vars_;
};

[[noreturn]] void unsupported(const std::string& what) { fail("chat template: {} is not supported", what); }

bool loose_equal(const Value& a, const Value& b) {
  // JavaScript `==` on the wrapped values, as @huggingface/jinja compares.
  const bool a_nullish = a.is(Kind::None) || a.is(Kind::Undefined), b_nullish = b.is(Kind::None) || b.is(Kind::Undefined);
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (a.is(Kind::String) && b.is(Kind::String)) return a.string == b.string;
  auto num = [](const Value& v, double& out) {
    if (v.numeric() || v.is(Kind::Bool)) { out = v.as_double(); return true; }
    if (v.is(Kind::String)) {
      const std::string t = js_trim(v.string, true, true);
      if (t.empty()) { out = 0; return true; }
      try {
        size_t used = 0;
        out = std::stod(t, &used);
        if (used != t.size()) out = NAN;
      } catch (...) { out = NAN; }
      return true;
    }
    return false;
  };
  double x, y;
  if (num(a, x) && num(b, y)) return x == y;
  if (a.is(Kind::Array) && b.is(Kind::Array)) return a.array == b.array;
  if (a.is(Kind::Object) && b.is(Kind::Object)) return a.object == b.object;
  return false;
}

class Interpreter {
 public:
  std::string render_block(const Node& block, Scope& scope) {
    std::string out;
    for (const NodePtr& st : block.children) render_statement(*st, scope, out);
    return out;
  }

 private:
  void render_statement(const Node& n, Scope& scope, std::string& out) {
    switch (n.kind) {
      case Node::Kind::Block: out += render_block(n, scope); return;
      case Node::Kind::Text: out += n.text; return;
      case Node::Kind::Output: {
        const Value v = eval(*n.children[0], scope);
        out += v.to_string();
        return;
      }
      case Node::Kind::If:
        out += render_block(eval(*n.children[0], scope).truthy() ? *n.children[1] : *n.children[2], scope);
        return;
      case Node::Kind::For: out += render_for(n, scope); return;
      case Node::Kind::Set: execute_set(n, scope); return;
      case Node::Kind::Break: throw BreakSignal{};
      case Node::Kind::Continue: throw ContinueSignal{};
      default: {
        const Value v = eval(n, scope);
        out += v.to_string();
      }
    }
  }

  void bind(const Node& target, const Value& v, Scope& scope) {
    if (target.kind == Node::Kind::Identifier) {
      scope.set(target.text, v);
    } else if (target.kind == Node::Kind::TupleLiteral) {
      if (!v.is(Kind::Array)) fail("chat template: cannot unpack non-iterable type: {}", v.type_name());
      if (v.array->size() != target.children.size())
        fail("chat template: too {} items to unpack", target.children.size() > v.array->size() ? "few" : "many");
      for (size_t i = 0; i < target.children.size(); ++i) bind(*target.children[i], (*v.array)[i], scope);
    } else {
      fail("chat template: invalid loop variable");
    }
  }

  std::string render_for(const Node& n, Scope& parent) {
    Scope scope(&parent);
    const Node& target = *n.children[0];
    const Node* iterable_node = n.children[1].get();
    const Node* test = nullptr;
    if (iterable_node->kind == Node::Kind::Select) {
      test = iterable_node->children[1].get();
      iterable_node = iterable_node->children[0].get();
    }
    Value iterable = eval(*iterable_node, scope);
    std::vector<Value> items;
    if (iterable.is(Kind::Array)) {
      items = *iterable.array;
    } else if (iterable.is(Kind::Object)) {
      for (const auto& [k, v] : iterable.object->items) items.push_back(Value::of(k));
    } else {
      fail("chat template: expected iterable or object type in for loop: got {}", iterable.type_name());
    }
    if (test) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        Scope loop_scope(&scope);
        bind(target, item, loop_scope);
        if (eval(*test, loop_scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    std::string out;
    bool none = true;
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      scope.set("loop", jinja::make_object({
          {"index", Value::of(i + 1)}, {"index0", Value::of(i)}, {"revindex", Value::of(length - i)},
          {"revindex0", Value::of(length - i - 1)}, {"first", Value::of(i == 0)}, {"last", Value::of(i == length - 1)},
          {"length", Value::of(length)}, {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
          {"nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value()}}));
      bind(target, items[static_cast<size_t>(i)], scope);
      try {
        out += render_block(*n.children[2], scope);
      } catch (const ContinueSignal&) {
        continue;
      } catch (const BreakSignal&) {
        break;
      }
      none = false;
    }
    if (none) out += render_block(*n.children[3], scope);
    return out;
  }

  void execute_set(const Node& n, Scope& scope) {
    const Value rhs = n.flag ? Value::of(render_block(*n.children[1], scope)) : eval(*n.children[1], scope);
    const Node& target = *n.children[0];
    if (target.kind == Node::Kind::Identifier) {
      scope.set(target.text, rhs);
    } else if (target.kind == Node::Kind::TupleLiteral) {
      bind(target, rhs, scope);
    } else if (target.kind == Node::Kind::Member && !target.flag) {
      Value object = eval(*target.children[0], scope);
      if (!object.is(Kind::Object) || !object.is_namespace)
        fail("chat template: cannot assign attribute on non-namespace object");
      object.object->set(target.children[1]->text, rhs);
    } else {
      fail("chat template: invalid left-hand side of set");
    }
  }

  Value eval(const Node& n, Scope& scope) {
    switch (n.kind) {
      case Node::Kind::Literal: return n.literal;
      case Node::Kind::Identifier: return lookup(n.text, scope);
      case Node::Kind::ListLiteral:
      case Node::Kind::TupleLiteral: {
        std::vector<Value> items;
        for (const NodePtr& c : n.children) items.push_back(eval(*c, scope));
        return Value::of(std::move(items));
      }
      case Node::Kind::DictLiteral: {
        std::vector<std::pair<std::string, Value>> items;
        for (size_t i = 0; i + 1 < n.children.size(); i += 2) {
          const Value k = eval(*n.children[i], scope);
          if (!k.is(Kind::String)) unsupported("a dict literal key that is not a string");
          items.emplace_back(k.string, eval(*n.children[i + 1], scope));
        }
        return jinja::make_object(std::move(items));
      }
      case Node::Kind::Member: return eval_member(n, scope);
      case Node::Kind::Call: return eval_call(n, scope);
      case Node::Kind::Binary: return eval_binary(n, scope);
      case Node::Kind::Unary: {
        const Value v = eval(*n.children[0], scope);
        if (n.text == "not") return Value::of(!v.truthy());
        if (v.is(Kind::Int)) return Value::of(n.text == "-" ? -v.integer : v.integer);
        if (v.is(Kind::Float)) return Value::of_float(n.text == "-" ? -v.number : v.number);
        fail("chat template: unary {} on {}", n.text, v.type_name());
      }
      case Node::Kind::Filter: return eval_filter(n, scope);
      case Node::Kind::Test: return eval_test(n, scope);
      case Node::Kind::Ternary:
        return eval(*n.children[0], scope).truthy() ? eval(*n.children[1], scope) : eval(*n.children[2], scope);
      case Node::Kind::Select:
        return eval(*n.children[1], scope).truthy() ? eval(*n.children[0], scope) : Value();
      case Node::Kind::Slice: fail("chat template: a slice outside []");
      default: fail("chat template: unexpected statement inside an expression");
    }
  }

  Value lookup(const std::string& name, Scope& scope) {
    Value v = scope.lookup(name);
    if (!v.is(Kind::Undefined)) return v;
    if (name == "raise_exception")
      return Value::of(jinja::Function([](const Args& a, const Kwargs&) -> Value {
        fail("chat template raised an exception: {}", a.empty() ? std::string() : a[0].to_string());
      }));
    if (name == "namespace")
      return Value::of(jinja::Function([](const Args& a, const Kwargs& kw) -> Value {
        std::vector<std::pair<std::string, Value>> items;
        if (!a.empty() && a[0].is(Kind::Object)) items = a[0].object->items;
        for (const auto& [k, v] : kw) items.emplace_back(k, v);
        return jinja::make_object(std::move(items), true);
      }));
    if (name == "range")
      return Value::of(jinja::Function([](const Args& a, const Kwargs&) -> Value {
        int64_t start = 0, stop = 0, step = 1;
        if (a.size() == 1) stop = a[0].integer;
        else if (a.size() >= 2) start = a[0].integer, stop = a[1].integer, step = a.size() > 2 ? a[2].integer : 1;
        if (step == 0) fail("chat template: range() step must not be zero");
        std::vector<Value> out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::of(i));
        return Value::of(std::move(out));
      }));
    return v;
  }

  static int64_t norm_index(int64_t i, int64_t size) { return i < 0 ? size + i : i; }

  Value eval_member(const Node& n, Scope& scope) {
    const Value object = eval(*n.children[0], scope);
    const Node& prop = *n.children[1];
    if (n.flag && prop.kind == Node::Kind::Slice) return eval_slice(object, prop, scope);
    const Value key = n.flag ? eval(prop, scope) : Value::of(prop.text);
    if (object.is(Kind::Object)) {
      if (!key.is(Kind::String)) fail("chat template: cannot access an object with a {} key", key.type_name());
      if (const Value* v = object.object->find(key.string)) return *v;
      if (!object.is_namespace) return object_method(object, key.string);
      return Value();
    }
    if (object.is(Kind::Array) || object.is(Kind::String)) {
      if (key.is(Kind::Int)) {
        if (object.is(Kind::Array)) {
          const int64_t i = norm_index(key.integer, static_cast<int64_t>(object.array->size()));
          if (i < 0 || i >= static_cast<int64_t>(object.array->size())) return Value();
          return (*object.array)[static_cast<size_t>(i)];
        }
        std::vector<std::string> chars = code_points(object.string);
        const int64_t i = norm_index(key.integer, static_cast<int64_t>(chars.size()));
        if (i < 0 || i >= static_cast<int64_t>(chars.size())) return Value();
        return Value::of(chars[static_cast<size_t>(i)]);
      }
      if (key.is(Kind::String)) {
        if (key.string == "length") return Value::of(object.is(Kind::Array) ? static_cast<int64_t>(object.array->size()) : js_length(object.string));
        if (object.is(Kind::String)) return string_method(object, key.string);
        unsupported("the list attribute '" + key.string + "'");
      }
      fail("chat template: cannot index a {} with a {}", object.type_name(), key.type_name());
    }
    if (object.is(Kind::Undefined)) return Value();
    fail("chat template: cannot access property '{}' of {}", key.to_string(), object.type_name());
  }

  static std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
      const size_t start = i;
      utf8_next(s, i);
      out.push_back(s.substr(start, i - start));
    }
    return out;
  }

  Value eval_slice(const Value& object, const Node& slice, Scope& scope) {
    auto part = [&](size_t k) -> std::optional<int64_t> {
      if (!slice.children[k]) return std::nullopt;
      const Value v = eval(*slice.children[k], scope);
      if (v.is(Kind::None) || v.is(Kind::Undefined)) return std::nullopt;
      if (!v.is(Kind::Int)) fail("chat template: slice indices must be integers");
      return v.integer;
    };
    const auto start = part(0), stop = part(1), step_opt = part(2);
    const int64_t step = step_opt.value_or(1);
    if (step == 0) fail("chat template: slice step cannot be zero");
    std::vector<Value> items;
    std::vector<std::string> chars;
    if (object.is(Kind::Array)) items = *object.array;
    else if (object.is(Kind::String)) chars = code_points(object.string);
    else fail("chat template: cannot slice a {}", object.type_name());
    const auto len = static_cast<int64_t>(object.is(Kind::Array) ? items.size() : chars.size());
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt, bool positive) -> int64_t {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + len : *v;
      if (positive) return std::clamp<int64_t>(x, 0, len);
      return std::clamp<int64_t>(x, -1, len - 1);
    };
    std::vector<int64_t> idx;
    if (step > 0) {
      for (int64_t i = clamp(start, 0, true), e = clamp(stop, len, true); i < e; i += step) idx.push_back(i);
    } else {
      for (int64_t i = clamp(start, len - 1, false), e = clamp(stop, -1, false); i > e; i += step) idx.push_back(i);
    }
    if (object.is(Kind::Array)) {
      std::vector<Value> out;
      for (int64_t i : idx) out.push_back(items[static_cast<size_t>(i)]);
      return Value::of(std::move(out));
    }
    std::string out;
    for (int64_t i : idx) out += chars[static_cast<size_t>(i)];
    return Value::of(out);
  }

  static Value object_method(const Value& object, const std::string& name) {
    auto obj = object.object;
    if (name == "items")
      return Value::of(jinja::Function([obj](const Args&, const Kwargs&) {
        std::vector<Value> out;
        for (const auto& [k, v] : obj->items) out.push_back(Value::of(std::vector<Value>{Value::of(k), v}));
        return Value::of(std::move(out));
      }));
    if (name == "keys")
      return Value::of(jinja::Function([obj](const Args&, const Kwargs&) {
        std::vector<Value> out;
        for (const auto& [k, v] : obj->items) out.push_back(Value::of(k));
        return Value::of(std::move(out));
      }));
    if (name == "values")
      return Value::of(jinja::Function([obj](const Args&, const Kwargs&) {
        std::vector<Value> out;
        for (const auto& [k, v] : obj->items) out.push_back(v);
        return Value::of(std::move(out));
      }));
    if (name == "get")
      return Value::of(jinja::Function([obj](const Args& a, const Kwargs&) {
        if (a.empty() || !a[0].is(Kind::String)) fail("chat template: get() needs a string key");
        if (const Value* v = obj->find(a[0].string)) return *v;
        return a.size() > 1 ? a[1] : Value::none();
      }));
    return Value();  // a missing key is undefined
  }

  static Value string_method(const Value& str, const std::string& name) {
    const std::string s = str.string;
    auto fn = [](auto f) { return Value::of(jinja::Function(f)); };
    if (name == "strip") return fn([s](const Args&, const Kwargs&) { return Value::of(js_trim(s, true, true)); });
    if (name == "lstrip") return fn([s](const Args&, const Kwargs&) { return Value::of(js_trim(s, true, false)); });
    if (name == "rstrip") return fn([s](const Args&, const Kwargs&) { return Value::of(js_trim(s, false, true)); });
    if (name == "upper" || name == "lower")
      return fn([s, name](const Args&, const Kwargs&) {
        std::string out = s;
        for (char& c : out) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        return Value::of(out);
      });
    if (name == "startswith" || name == "endswith")
      return fn([s, name](const Args& a, const Kwargs&) {
        if (a.empty()) fail("chat template: {}() requires an argument", name);
        auto test = [&](const std::string& p) {
          if (p.size() > s.size()) return false;
          return name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
        };
        if (a[0].is(Kind::String)) return Value::of(test(a[0].string));
        if (a[0].is(Kind::Array)) {
          for (const Value& p : *a[0].array)
            if (p.is(Kind::String) && test(p.string)) return Value::of(true);
          return Value::of(false);
        }
        fail("chat template: {}() argument must be a string or tuple of strings", name);
      });
    if (name == "split")
      return fn([s](const Args& a, const Kwargs&) {
        std::vector<Value> out;
        const int64_t maxsplit = a.size() > 1 && a[1].is(Kind::Int) ? a[1].integer : -1;
        if (a.empty() || a[0].is(Kind::None)) {
          std::string t = js_trim(s, true, false);
          size_t i = 0;
          while (i < t.size()) {
            size_t j = i;
            while (j < t.size() && !is_space_ascii(t[j])) ++j;
            if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
              out.push_back(Value::of(t.substr(i)));
              break;
            }
            out.push_back(Value::of(t.substr(i, j - i)));
            while (j < t.size() && is_space_ascii(t[j])) ++j;
            i = j;
          }
          return Value::of(std::move(out));
        }
        const std::string sep = a[0].string;
        if (sep.empty()) fail("chat template: split() with an empty separator");
        size_t start = 0;
        while (true) {
          if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
            out.push_back(Value::of(s.substr(start)));
            break;
          }
          const size_t at = s.find(sep, start);
          if (at == std::string::npos) {
            out.push_back(Value::of(s.substr(start)));
            break;
          }
          out.push_back(Value::of(s.substr(start, at - start)));
          start = at + sep.size();
        }
        return Value::of(std::move(out));
      });
    if (name == "replace")
      return fn([s](const Args& a, const Kwargs&) {
        if (a.size() < 2 || !a[0].is(Kind::String) || !a[1].is(Kind::String))
          fail("chat template: replace() needs two string arguments");
        int64_t count = a.size() > 2 && a[2].is(Kind::Int) ? a[2].integer : -1;
        const std::string& from = a[0].string;
        const std::string& to = a[1].string;
        if (from.empty()) unsupported("replace() with an empty pattern");
        std::string out;
        size_t start = 0;
        while (count != 0) {
          const size_t at = s.find(from, start);
          if (at == std::string::npos) break;
          out += s.substr(start, at - start) + to;
          start = at + from.size();
          --count;
        }
        return Value::of(out + s.substr(start));
      });
    if (name == "title" || name == "capitalize") unsupported("the string method '" + name + "'");
    unsupported("the string method or attribute '" + name + "'");
  }
  static bool is_space_ascii(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

  Value eval_call(const Node& n, Scope& scope) {
    const Value callee = eval(*n.children[0], scope);
    Args args;
    Kwargs kwargs;
    for (size_t i = 1; i < n.children.size(); ++i) {
      if (n.children[i]->kind == Node::Kind::KeywordArg) kwargs.emplace_back(n.children[i]->text, eval(*n.children[i]->children[0], scope));
      else args.push_back(eval(*n.children[i], scope));
    }
    if (!callee.is(Kind::Function)) {
      const Node& c = *n.children[0];
      const std::string name = c.kind == Node::Kind::Identifier ? c.text : c.kind == Node::Kind::Member ? c.children[1]->text : "?";
      fail("chat template: '{}' is not a function (unsupported or undefined)", name);
    }
    return (*callee.function)(args, kwargs);
  }

  Value eval_binary(const Node& n, Scope& scope) {
    const std::string& o = n.text;
    const Value l = eval(*n.children[0], scope);
    if (o == "and") return l.truthy() ? eval(*n.children[1], scope) : l;
    if (o == "or") return l.truthy() ? l : eval(*n.children[1], scope);
    const Value r = eval(*n.children[1], scope);
    if (o == "==") return Value::of(loose_equal(l, r));
    if (o == "!=") return Value::of(!loose_equal(l, r));
    if (l.numeric() && r.numeric() && o != "~" && o != "**") {
      const bool is_float = l.is(Kind::Float) || r.is(Kind::Float);
      const double a = l.as_double(), b = r.as_double();
      if (o == "+" || o == "-" || o == "*") {
        if (!is_float) return Value::of(o == "+" ? l.integer + r.integer : o == "-" ? l.integer - r.integer : l.integer * r.integer);
        return Value::of_float(o == "+" ? a + b : o == "-" ? a - b : a * b);
      }
      if (o == "/") return Value::of_float(a / b);
      if (o == "//") return is_float ? Value::of_float(std::floor(a / b)) : Value::of(static_cast<int64_t>(std::floor(a / b)));
      if (o == "%") {
        if (!is_float) {
          if (r.integer == 0) fail("chat template: modulo by zero");
          return Value::of(l.integer % r.integer);  // JS remainder keeps the sign of the dividend
        }
        return Value::of_float(std::fmod(a, b));
      }
      if (o == "<") return Value::of(a < b);
      if (o == ">") return Value::of(a > b);
      if (o == "<=") return Value::of(a <= b);
      if (o == ">=") return Value::of(a >= b);
    }
    if (l.is(Kind::Undefined) || r.is(Kind::Undefined)) {
      if (r.is(Kind::Undefined) && (o == "in" || o == "not in")) return Value::of(o == "not in");
      if (o == "~" && !l.is(Kind::None) && !r.is(Kind::None)) return Value::of(l.to_string() + r.to_string());
      fail("chat template: cannot perform operation {} on undefined values", o);
    }
    if (l.is(Kind::None) || r.is(Kind::None)) fail("chat template: cannot perform operation {} on none values", o);
    if (o == "~") return Value::of(l.to_string() + r.to_string());
    if (o == "+" && l.is(Kind::Array) && r.is(Kind::Array)) {
      std::vector<Value> out = *l.array;
      out.insert(out.end(), r.array->begin(), r.array->end());
      return Value::of(std::move(out));
    }
    if ((o == "in" || o == "not in") && r.is(Kind::Array)) {
      bool member = false;
      for (const Value& x : *r.array) member |= strict_equal(x, l);
      return Value::of(o == "in" ? member : !member);
    }
    if (o == "+" && (l.is(Kind::String) || r.is(Kind::String))) return Value::of(l.to_string() + r.to_string());
    if ((o == "in" || o == "not in") && l.is(Kind::String) && r.is(Kind::String)) {
      const bool found = r.string.find(l.string) != std::string::npos;
      return Value::of(o == "in" ? found : !found);
    }
    if ((o == "in" || o == "not in") && l.is(Kind::String) && r.is(Kind::Object)) {
      const bool found = r.object->find(l.string) != nullptr;
      return Value::of(o == "in" ? found : !found);
    }
    if ((o == "<" || o == ">" || o == "<=" || o == ">=") && l.is(Kind::String) && r.is(Kind::String)) {
      const int c = l.string.compare(r.string);
      return Value::of(o == "<" ? c < 0 : o == ">" ? c > 0 : o == "<=" ? c <= 0 : c >= 0);
    }
    fail("chat template: operator '{}' between {} and {} is not supported", o, l.type_name(), r.type_name());
  }
  static bool strict_equal(const Value& a, const Value& b) {
    if (a.kind != b.kind) return a.numeric() && b.numeric() && a.as_double() == b.as_double();
    return loose_equal(a, b);
  }

  Value eval_filter(const Node& n, Scope& scope) {
    const Value v = eval(*n.children[0], scope);
    const Node& f = *n.children[1];
    std::string name;
    Args args;
    Kwargs kwargs;
    if (f.kind == Node::Kind::Identifier) {
      name = f.text;
    } else {
      name = f.children[0]->text;
      for (size_t i = 1; i < f.children.size(); ++i) {
        if (f.children[i]->kind == Node::Kind::KeywordArg) kwargs.emplace_back(f.children[i]->text, eval(*f.children[i]->children[0], scope));
        else args.push_back(eval(*f.children[i], scope));
      }
    }
    auto kw = [&](const char* key) -> const Value* {
      for (const auto& [k, val] : kwargs)
        if (k == key) return &val;
      return nullptr;
    };
    if (name == "tojson") {
      jinja::JsonOptions o;
      if (const Value* i = kw("indent"); i && i->is(Kind::Int)) o.indent = static_cast<int>(i->integer);
      if (!args.empty() && args[0].is(Kind::Int)) o.indent = static_cast<int>(args[0].integer);
      if (const Value* a = kw("ensure_ascii"); a && a->is(Kind::Bool)) o.ensure_ascii = a->boolean;
      if (const Value* s = kw("sort_keys"); s && s->is(Kind::Bool)) o.sort_keys = s->boolean;
      if (const Value* sep = kw("separators"); sep && sep->is(Kind::Array) && sep->array->size() == 2) {
        o.item_sep = (*sep->array)[0].string;
        o.key_sep = (*sep->array)[1].string;
      }
      return Value::of(jinja::to_json(v, o));
    }
    if (name == "default" || name == "d") {
      const bool boolean = args.size() > 1 && args[1].truthy();
      if (v.is(Kind::Undefined) || (boolean && !v.truthy())) return args.empty() ? Value::of(std::string()) : args[0];
      return v;
    }
    if (v.is(Kind::Array)) {
      const auto& a = *v.array;
      if (name == "length" || name == "count") return Value::of(static_cast<int64_t>(a.size()));
      if (name == "first") return a.empty() ? Value() : a.front();
      if (name == "last") return a.empty() ? Value() : a.back();
      if (name == "list") return v;
      if (name == "reverse") return Value::of(std::vector<Value>(a.rbegin(), a.rend()));
      if (name == "join") {
        const std::string sep = args.empty() ? "" : args[0].to_string();
        std::string out;
        for (size_t i = 0; i < a.size(); ++i) out += (i ? sep : "") + a[i].to_string();
        return Value::of(out);
      }
      if (name == "string") return Value::of(v.to_string());
      unsupported("the filter '" + name + "' on a list");
    }
    if (v.is(Kind::String)) {
      if (name == "trim") return Value::of(js_trim(v.string, true, true));
      if (name == "length" || name == "count") return Value::of(js_length(v.string));
      if (name == "string") return v;
      if (name == "upper" || name == "lower") return (*string_method(v, name).function)({}, {});
      if (name == "list") {
        std::vector<Value> out;
        for (auto& c : code_points(v.string)) out.push_back(Value::of(c));
        return Value::of(std::move(out));
      }
      if (name == "int") {
        try { return Value::of(static_cast<int64_t>(std::stoll(v.string))); } catch (...) { return Value::of(int64_t{0}); }
      }
      unsupported("the filter '" + name + "' on a string");
    }
    if (v.is(Kind::Object)) {
      if (name == "items") return (*object_method(v, "items").function)({}, {});
      if (name == "length" || name == "count") return Value::of(static_cast<int64_t>(v.object->items.size()));
      if (name == "string") return Value::of(v.to_string());
      unsupported("the filter '" + name + "' on an object");
    }
    if (v.numeric() || v.is(Kind::Bool)) {
      if (name == "string") return Value::of(v.to_string());
      if (name == "int") return Value::of(static_cast<int64_t>(v.as_double()));
      if (name == "abs") return v.is(Kind::Int) ? Value::of(v.integer < 0 ? -v.integer : v.integer) : Value::of_float(std::fabs(v.number));
      unsupported("the filter '" + name + "' on a " + v.type_name());
    }
    if (name == "string") return Value::of(v.to_string());
    unsupported("the filter '" + name + "' on " + v.type_name());
  }

  Value eval_test(const Node& n, Scope& scope) {
    const Value v = eval(*n.children[0], scope);
    const std::string& t = n.text;
    bool r;
    if (t == "defined") r = !v.is(Kind::Undefined);
    else if (t == "undefined") r = v.is(Kind::Undefined);
    else if (t == "none") r = v.is(Kind::None);
    else if (t == "string") r = v.is(Kind::String);
    else if (t == "number") r = v.numeric();
    else if (t == "integer") r = v.is(Kind::Int);
    else if (t == "float") r = v.is(Kind::Float);
    else if (t == "boolean") r = v.is(Kind::Bool);
    else if (t == "true") r = v.is(Kind::Bool) && v.boolean;
    else if (t == "false") r = v.is(Kind::Bool) && !v.boolean;
    else if (t == "mapping") r = v.is(Kind::Object);
    else if (t == "sequence" || t == "iterable") r = v.is(Kind::Array) || v.is(Kind::String) || (t == "iterable" && v.is(Kind::Object));
    else if (t == "callable") r = v.is(Kind::Function);
    else if (t == "odd" || t == "even") {
      if (!v.is(Kind::Int)) fail("chat template: cannot apply test '{}' to {}", t, v.type_name());
      r = (v.integer % 2 != 0) == (t == "odd");
    } else unsupported("the test 'is " + t + "'");
    return Value::of(n.flag ? !r : r);
  }
};

}  // namespace

JinjaTemplate::JinjaTemplate(const std::string& source) : root_(jinja::parse_template(source)) {}
JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  Scope globals;
  globals.set("true", Value::of(true));
  globals.set("false", Value::of(false));
  globals.set("none", Value::none());
  if (!context.is_object()) fail("chat template: the context must be a JSON object");
  for (auto it = context.begin(); it != context.end(); ++it) globals.set(it.key(), Value::from_json(it.value()));
  Scope scope(&globals);
  Interpreter interpreter;
  return interpreter.render_block(*root_, scope);
}

}  // namespace latentserve::tokenizer
