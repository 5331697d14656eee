#pragma once
// Lexer and parser of the Jinja subset (see jinja.h): source -> syntax tree.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace latentserve::tokenizer::jinja {

struct Node {
  enum class Kind {
    Block, Text, Output, If, For, Set, Break, Continue,
    Literal, Identifier, Member, Slice, Call, Binary, Unary, Filter, Test, Ternary, Select,
    ListLiteral, TupleLiteral, DictLiteral, KeywordArg
  };
  Kind kind;
  std::string text;        // Text, Identifier, operator, filter/test name, keyword name
  Value literal;           // Literal
  bool flag = false;       // Member: computed ([]); Test: negated
  std::vector<std::shared_ptr<Node>> children;
  // If: {test, body, else}; For: {target, iterable, body, else, filter?}; Set: {target, value|body};
  // Member: {object, property}; Slice: {start?, stop?, step?} (null = absent);
  // Call: {callee, args...}; Binary: {lhs, rhs}; Unary: {arg}; Filter: {operand, call-or-identifier};
  // Test: {operand}; Ternary: {test, then, else}; Select: {value, test}; KeywordArg: {value}.
};
using NodePtr = std::shared_ptr<Node>;

NodePtr parse_template(const std::string& source);

}  // namespace latentserve::tokenizer::jinja
