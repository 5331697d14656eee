#include "tokenizer/jinja_parse.h"

#include <cctype>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer::jinja {

namespace {

enum class T { Text, OpenStmt, CloseStmt, OpenExpr, CloseExpr, Comment, Ident, Number, String, Op };
struct Token {
  T type;
  std::string value;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// @huggingface/jinja's preprocess: drop one trailing newline; lstrip_blocks; trim_blocks.
std::string preprocess(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  std::string a;
  a.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const bool line_start = i == 0 || s[i - 1] == '\n' || s[i - 1] == '\r';
    if (line_start) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j > i && j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        i = j;
        continue;
      }
    }
    a += s[i++];
  }
  std::string b;
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    b += a[i];
    if (a[i] == '}' && i > 0 && (a[i - 1] == '#' || a[i - 1] == '%' || a[i - 1] == '-') && i + 1 < a.size() && a[i + 1] == '\n')
      ++i;
  }
  return b;
}

std::string trim_end_js(std::string s) {
  // JavaScript String.prototype.trimEnd over ASCII whitespace and the common Unicode spaces.
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    const char32_t cp = utf8_next(s, i);
    if (!(is_whitespace(cp) || cp == 0xFEFF) || cp == 0x85) break;
    s.resize(start);
  }
  return s;
}

std::vector<Token> tokenize(const std::string& source) {
  const std::string src = preprocess(source);
  std::vector<Token> tokens;
  size_t pos = 0;
  const size_t n = src.size();
  int curly = 0;
  auto strip_trailing = [&] {
    if (!tokens.empty() && tokens.back().type == T::Text) {
      tokens.back().value = trim_end_js(tokens.back().value);
      if (tokens.back().value.empty()) tokens.pop_back();
    }
  };
  auto skip_leading = [&] {
    while (pos < n && is_space(src[pos])) ++pos;
  };
  static const char* ops[] = {"{%", "%}", "{{", "}}", "**", "//", "==", "!=", ">=", "<=", "(", ")", "{", "}", ",", ".",
                              ":", "[", "]", "|", ">", "<", "+", "-", "~", "*", "/", "%", "=", nullptr};
  while (pos < n) {
    const T last = tokens.empty() ? T::CloseStmt : tokens.back().type;
    if (tokens.empty() || last == T::CloseStmt || last == T::CloseExpr || last == T::Comment) {
      size_t end = pos;
      while (true) {
        end = src.find('{', end);
        if (end == std::string::npos) { end = n; break; }
        if (end + 1 < n && (src[end + 1] == '%' || src[end + 1] == '{' || src[end + 1] == '#')) break;
        ++end;
      }
      if (end > pos) {
        tokens.push_back({T::Text, src.substr(pos, end - pos)});
        pos = end;
        continue;
      }
    }
    if (src[pos] == '{' && pos + 1 < n) {
      const char next = src[pos + 1];
      if (next == '#') {
        pos += 2;
        const bool strip_before = pos < n && src[pos] == '-';
        if (strip_before) ++pos;
        const size_t end = src.find("#}", pos);
        if (end == std::string::npos) fail("chat template: missing end of comment tag");
        std::string comment = src.substr(pos, end - pos);
        const bool strip_after = !comment.empty() && comment.back() == '-';
        if (strip_before) strip_trailing();
        tokens.push_back({T::Comment, comment});
        pos = end + 2;
        if (strip_after) skip_leading();
        continue;
      }
      if (pos + 2 < n && src[pos + 2] == '-' && (next == '%' || next == '{')) {
        strip_trailing();
        tokens.push_back({next == '%' ? T::OpenStmt : T::OpenExpr, next == '%' ? "{%" : "{{"});
        if (next == '{') curly = 0;
        pos += 3;
        continue;
      }
    }
    while (pos < n && is_space(src[pos])) ++pos;
    if (pos >= n) break;
    const char c = src[pos];
    if (c == '-' && pos + 2 < n && src[pos + 2] == '}' && (src[pos + 1] == '%' || src[pos + 1] == '}')) {
      tokens.push_back({src[pos + 1] == '%' ? T::CloseStmt : T::CloseExpr, src[pos + 1] == '%' ? "%}" : "}}"});
      pos += 3;
      skip_leading();
      continue;
    }
    if (c == '\'' || c == '"') {
      ++pos;
      std::string str;
      while (true) {
        if (pos >= n) fail("chat template: unterminated string literal");
        const char ch = src[pos++];
        if (ch == c) break;
        if (ch != '\\') { str += ch; continue; }
        if (pos >= n) fail("chat template: unterminated string literal");
        const char e = src[pos++];
        switch (e) {
          case 'n': str += '\n'; break;
          case 't': str += '\t'; break;
          case 'r': str += '\r'; break;
          case 'b': str += '\b'; break;
          case 'f': str += '\f'; break;
          case 'v': str += '\v'; break;
          case '\'': str += '\''; break;
          case '"': str += '"'; break;
          case '\\': str += '\\'; break;
          case 'x': case 'u': {
            const size_t len = e == 'x' ? 2 : 4;
            if (pos + len > n) fail("chat template: invalid \\{} escape", e);
            const std::string hex = src.substr(pos, len);
            for (char h : hex)
              if (!std::isxdigit(static_cast<unsigned char>(h))) fail("chat template: invalid escape \\{}{}", e, hex);
            utf8_append(str, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
            pos += len;
            break;
          }
          default: fail("chat template: unexpected escaped character '\\{}'", e);
        }
      }
      tokens.push_back({T::String, str});
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = pos;
      while (end < n && std::isdigit(static_cast<unsigned char>(src[end]))) ++end;
      if (end + 1 < n && src[end] == '.' && std::isdigit(static_cast<unsigned char>(src[end + 1]))) {
        ++end;
        while (end < n && std::isdigit(static_cast<unsigned char>(src[end]))) ++end;
      }
      tokens.push_back({T::Number, src.substr(pos, end - pos)});
      pos = end;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos;
      while (end < n && (std::isalnum(static_cast<unsigned char>(src[end])) || src[end] == '_')) ++end;
      tokens.push_back({T::Ident, src.substr(pos, end - pos)});
      pos = end;
      continue;
    }
    bool matched = false;
    for (const char** op = ops; *op; ++op) {
      const std::string o = *op;
      if (src.compare(pos, o.size(), o) != 0) continue;
      if (o == "}}" && curly > 0) continue;  // closing a dict literal inside an expression
      if (o == "{%") tokens.push_back({T::OpenStmt, o});
      else if (o == "%}") tokens.push_back({T::CloseStmt, o});
      else if (o == "{{") { tokens.push_back({T::OpenExpr, o}); curly = 0; }
      else if (o == "}}") tokens.push_back({T::CloseExpr, o});
      else {
        if (o == "{") ++curly;
        if (o == "}") --curly;
        tokens.push_back({T::Op, o});
      }
      pos += o.size();
      matched = true;
      break;
    }
    if (!matched) fail("chat template: unexpected character '{}'", c);
  }
  return tokens;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  NodePtr parse_program() {
    auto block = node(Node::Kind::Block);
    while (i_ < t_.size()) block->children.push_back(parse_any());
    return block;
  }

 private:
  static NodePtr node(Node::Kind k) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    return n;
  }
  bool at(T type, const char* v = nullptr, size_t ahead = 0) const {
    const size_t k = i_ + ahead;
    return k < t_.size() && t_[k].type == type && (!v || t_[k].value == v);
  }
  bool ident(const char* v, size_t ahead = 0) const { return at(T::Ident, v, ahead); }
  bool op(const char* v) const { return at(T::Op, v); }
  const Token& expect(T type, const char* v, const char* what) {
    if (!at(type, v)) fail("chat template: expected {} near '{}'", what, i_ < t_.size() ? t_[i_].value : "end of template");
    return t_[i_++];
  }
  // Is the statement at i_ "{% name"?
  bool stmt(const char* name) const { return at(T::OpenStmt) && ident(name, 1); }

  NodePtr parse_any() {
    const Token& tok = t_[i_];
    switch (tok.type) {
      case T::Comment: ++i_; return node(Node::Kind::Block);
      case T::Text: {
        auto n = node(Node::Kind::Text);
        n->text = tok.value;
        ++i_;
        return n;
      }
      case T::OpenStmt: return parse_statement();
      case T::OpenExpr: {
        ++i_;
        auto n = node(Node::Kind::Output);
        n->children.push_back(parse_expression());
        expect(T::CloseExpr, nullptr, "}}");
        return n;
      }
      default: fail("chat template: unexpected '{}'", tok.value);
    }
  }

  NodePtr parse_block_until(std::initializer_list<const char*> ends) {
    auto block = node(Node::Kind::Block);
    while (i_ < t_.size()) {
      for (const char* e : ends)
        if (stmt(e)) return block;
      block->children.push_back(parse_any());
    }
    fail("chat template: missing {{% {} %}}", *ends.begin());
  }

  NodePtr parse_statement() {
    expect(T::OpenStmt, nullptr, "{%");
    if (!at(T::Ident)) fail("chat template: expected a statement name after {{%");
    const std::string name = t_[i_++].value;
    if (name == "set") return parse_set();
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "break" || name == "continue") {
      expect(T::CloseStmt, nullptr, "%}");
      return node(name == "break" ? Node::Kind::Break : Node::Kind::Continue);
    }
    if (name == "generation" || name == "endgeneration") {  // transformers' assistant-mask markers
      expect(T::CloseStmt, nullptr, "%}");
      return node(Node::Kind::Block);
    }
    fail("chat template: the statement '{{% {} %}}' is not supported", name);
  }

  NodePtr parse_set() {
    auto n = node(Node::Kind::Set);
    n->children.push_back(parse_expression_sequence());
    if (op("=")) {
      ++i_;
      n->children.push_back(parse_expression_sequence());
      expect(T::CloseStmt, nullptr, "%}");
    } else {
      expect(T::CloseStmt, nullptr, "%} or =");
      auto body = parse_block_until({"endset"});
      i_ += 2;
      expect(T::CloseStmt, nullptr, "%}");
      n->children.push_back(body);
      n->flag = true;  // block set
    }
    return n;
  }

  NodePtr parse_if() {
    auto n = node(Node::Kind::If);
    n->children.push_back(parse_expression());
    expect(T::CloseStmt, nullptr, "%}");
    n->children.push_back(parse_block_until({"elif", "else", "endif"}));
    if (stmt("elif")) {
      ++i_;  // "{%"; the "elif" identifier becomes the "if" of a nested If
      n->children.push_back(parse_if_nested());
    } else if (stmt("else")) {
      i_ += 2;
      expect(T::CloseStmt, nullptr, "%}");
      n->children.push_back(parse_block_until({"endif"}));
      i_ += 2;
      expect(T::CloseStmt, nullptr, "%}");
    } else {
      i_ += 2;
      expect(T::CloseStmt, nullptr, "%}");
      n->children.push_back(node(Node::Kind::Block));
    }
    return n;
  }
  NodePtr parse_if_nested() {
    ++i_;  // "elif"
    auto block = node(Node::Kind::Block);
    block->children.push_back(parse_if());
    return block;
  }

  NodePtr parse_for() {
    auto n = node(Node::Kind::For);
    n->children.push_back(parse_expression_sequence(true));
    if (!ident("in")) fail("chat template: expected 'in' in a for loop");
    ++i_;
    auto iterable = parse_expression();
    n->children.push_back(iterable);
    expect(T::CloseStmt, nullptr, "%}");
    n->children.push_back(parse_block_until({"else", "endfor"}));
    if (stmt("else")) {
      i_ += 2;
      expect(T::CloseStmt, nullptr, "%}");
      n->children.push_back(parse_block_until({"endfor"}));
    } else {
      n->children.push_back(node(Node::Kind::Block));
    }
    i_ += 2;
    expect(T::CloseStmt, nullptr, "%}");
    return n;
  }

  NodePtr parse_expression_sequence(bool primary = false) {
    auto first = primary ? parse_call_member() : parse_expression();
    if (!op(",")) return first;
    auto tuple = node(Node::Kind::TupleLiteral);
    tuple->children.push_back(first);
    while (op(",")) {
      ++i_;
      tuple->children.push_back(primary ? parse_call_member() : parse_expression());
    }
    return tuple;
  }

  NodePtr parse_expression() { return parse_if_expression(); }

  NodePtr parse_if_expression() {
    auto a = parse_or();
    if (ident("if")) {
      ++i_;
      auto test = parse_or();
      if (ident("else")) {
        ++i_;
        auto n = node(Node::Kind::Ternary);
        n->children = {test, a, parse_if_expression()};
        return n;
      }
      auto n = node(Node::Kind::Select);
      n->children = {a, test};
      return n;
    }
    return a;
  }
  NodePtr binary(const std::string& o, NodePtr l, NodePtr r) {
    auto n = node(Node::Kind::Binary);
    n->text = o;
    n->children = {std::move(l), std::move(r)};
    return n;
  }
  NodePtr parse_or() {
    auto l = parse_and();
    while (ident("or")) { ++i_; l = binary("or", l, parse_and()); }
    return l;
  }
  NodePtr parse_and() {
    auto l = parse_not();
    while (ident("and")) { ++i_; l = binary("and", l, parse_not()); }
    return l;
  }
  NodePtr parse_not() {
    if (ident("not")) {
      ++i_;
      auto n = node(Node::Kind::Unary);
      n->text = "not";
      n->children.push_back(parse_not());
      return n;
    }
    return parse_comparison();
  }
  NodePtr parse_comparison() {
    auto l = parse_additive();
    while (true) {
      std::string o;
      if (ident("not") && ident("in", 1)) { o = "not in"; i_ += 2; }
      else if (ident("in")) { o = "in"; ++i_; }
      else if (op("==") || op("!=") || op("<") || op(">") || op("<=") || op(">=")) o = t_[i_++].value;
      else break;
      l = binary(o, l, parse_additive());
    }
    return l;
  }
  NodePtr parse_additive() {
    auto l = parse_multiplicative();
    while (op("+") || op("-") || op("~")) {
      const std::string o = t_[i_++].value;
      l = binary(o, l, parse_multiplicative());
    }
    return l;
  }
  NodePtr parse_multiplicative() {
    auto l = parse_power();
    while (op("*") || op("/") || op("//") || op("%")) {
      const std::string o = t_[i_++].value;
      l = binary(o, l, parse_power());
    }
    return l;
  }
  NodePtr parse_power() {
    auto l = parse_test();
    while (op("**")) { ++i_; l = binary("**", l, parse_test()); }
    return l;
  }
  NodePtr parse_test() {
    auto operand = parse_filter();
    while (ident("is")) {
      ++i_;
      const bool negate = ident("not");
      if (negate) ++i_;
      if (!at(T::Ident)) fail("chat template: expected the name of a test after 'is'");
      auto n = node(Node::Kind::Test);
      n->text = t_[i_++].value;
      if (op("(")) fail("chat template: the test 'is {}(...)' with arguments is not supported", n->text);
      n->flag = negate;
      n->children.push_back(operand);
      operand = n;
    }
    return operand;
  }
  NodePtr parse_filter() {
    auto operand = parse_unary_sign();
    while (op("|")) {
      ++i_;
      if (!at(T::Ident)) fail("chat template: expected a filter name after '|'");
      auto name = node(Node::Kind::Identifier);
      name->text = t_[i_++].value;
      NodePtr f = op("(") ? parse_call(name) : name;
      auto n = node(Node::Kind::Filter);
      n->children = {operand, f};
      operand = n;
    }
    return operand;
  }
  NodePtr parse_unary_sign() {
    if (op("-") || op("+")) {
      auto n = node(Node::Kind::Unary);
      n->text = t_[i_++].value;
      n->children.push_back(parse_unary_sign());
      return n;
    }
    return parse_call_member();
  }
  NodePtr parse_call_member() {
    auto member = parse_member(parse_primary());
    if (op("(")) return parse_call(member);
    return member;
  }
  NodePtr parse_call(NodePtr callee) {
    auto n = node(Node::Kind::Call);
    n->children.push_back(callee);
    expect(T::Op, "(", "(");
    while (!op(")")) {
      if (at(T::Ident) && at(T::Op, "=", 1)) {
        auto kw = node(Node::Kind::KeywordArg);
        kw->text = t_[i_].value;
        i_ += 2;
        kw->children.push_back(parse_expression());
        n->children.push_back(kw);
      } else {
        n->children.push_back(parse_expression());
      }
      if (!op(")")) expect(T::Op, ",", ", or )");
    }
    ++i_;
    auto result = parse_member(n);
    if (op("(")) return parse_call(result);
    return result;
  }
  NodePtr parse_member(NodePtr object) {
    while (op(".") || op("[")) {
      const bool computed = op("[");
      ++i_;
      auto n = node(Node::Kind::Member);
      n->flag = computed;
      NodePtr property;
      if (computed) {
        property = parse_subscript();
        expect(T::Op, "]", "]");
      } else {
        if (!at(T::Ident)) fail("chat template: expected an attribute name after '.'");
        property = node(Node::Kind::Identifier);
        property->text = t_[i_++].value;
      }
      n->children = {object, property};
      object = n;
    }
    return object;
  }
  NodePtr parse_subscript() {
    std::vector<NodePtr> parts(1);
    bool slice = false;
    while (!op("]")) {
      if (op(":")) {
        parts.emplace_back();
        slice = true;
        ++i_;
      } else {
        parts.back() = parse_expression();
      }
    }
    if (!slice) {
      if (!parts[0]) fail("chat template: empty subscript []");
      return parts[0];
    }
    if (parts.size() > 3) fail("chat template: a slice has at most three parts");
    auto n = node(Node::Kind::Slice);
    parts.resize(3);
    n->children = parts;
    return n;
  }
  NodePtr parse_primary() {
    if (i_ >= t_.size()) fail("chat template: unexpected end of template in an expression");
    const Token tok = t_[i_++];
    switch (tok.type) {
      case T::Number: {
        auto n = node(Node::Kind::Literal);
        n->literal = tok.value.find('.') != std::string::npos ? Value::of_float(std::stod(tok.value))
                                                              : Value::of(static_cast<int64_t>(std::stoll(tok.value)));
        return n;
      }
      case T::String: {
        std::string s = tok.value;
        while (at(T::String)) s += t_[i_++].value;  // adjacent literals concatenate
        auto n = node(Node::Kind::Literal);
        n->literal = Value::of(s);
        return n;
      }
      case T::Ident: {
        auto n = node(Node::Kind::Literal);
        if (tok.value == "true" || tok.value == "True") n->literal = Value::of(true);
        else if (tok.value == "false" || tok.value == "False") n->literal = Value::of(false);
        else if (tok.value == "none" || tok.value == "None") n->literal = Value::none();
        else {
          n->kind = Node::Kind::Identifier;
          n->text = tok.value;
        }
        return n;
      }
      case T::Op: {
        if (tok.value == "(") {
          auto e = parse_expression_sequence();
          expect(T::Op, ")", ")");
          return e;
        }
        if (tok.value == "[") {
          auto n = node(Node::Kind::ListLiteral);
          while (!op("]")) {
            n->children.push_back(parse_expression());
            if (op(",")) ++i_;
          }
          ++i_;
          return n;
        }
        if (tok.value == "{") {
          auto n = node(Node::Kind::DictLiteral);
          while (!op("}")) {
            n->children.push_back(parse_expression());
            expect(T::Op, ":", ":");
            n->children.push_back(parse_expression());
            if (op(",")) ++i_;
          }
          ++i_;
          return n;
        }
        break;
      }
      default: break;
    }
    fail("chat template: unexpected '{}' in an expression", tok.value);
  }

  std::vector<Token> t_;
  size_t i_ = 0;
};

}  // namespace

NodePtr parse_template(const std::string& source) { return Parser(tokenize(source)).parse_program(); }

}  // namespace latentserve::tokenizer::jinja
