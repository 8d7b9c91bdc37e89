// Owns reading a Jinja template into the syntax tree of jinja_ast.h: Hugging Face's environment
// (trim_blocks, lstrip_blocks, one trailing newline dropped), the lexer with whitespace control, and
// a recursive-descent parser with Jinja's operator precedence (or < and < not < comparisons <
// + - < ~ < * / // % < unary minus < primary with attributes, items, calls, filters and tests).
#include <algorithm>
#include <cctype>
#include <set>

#include "base/error.h"
#include "data/jinja_ast.h"

namespace mt::jinja {
namespace {

struct Token {
  enum Kind { text, var_begin, var_end, block_begin, block_end, name, integer, number, string, op, end } kind;
  std::string s;
  int line;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Hugging Face's environment: trim_blocks removes the newline after a block or comment tag,
// lstrip_blocks the spaces and tabs before one on its line; a final newline is dropped.
std::string hf_environment(std::string t) {
  if (!t.empty() && t.back() == '\n') t.pop_back();
  std::string out;
  out.reserve(t.size());
  for (size_t pos = 0; pos < t.size();) {
    // At a line start: drop [ \t]* before "{%" or "{#".
    if (pos == 0 || t[pos - 1] == '\n') {
      size_t k = pos;
      while (k < t.size() && (t[k] == ' ' || t[k] == '\t')) ++k;
      if (k + 1 < t.size() && t[k] == '{' && (t[k + 1] == '%' || t[k + 1] == '#' || t[k + 1] == '-')) pos = k;
    }
    const size_t eol = t.find('\n', pos);
    const size_t stop = eol == std::string::npos ? t.size() : eol + 1;
    out.append(t, pos, stop - pos);
    pos = stop;
  }
  std::string trimmed;
  trimmed.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    trimmed += out[i];
    if (out[i] == '}' && i > 0 && (out[i - 1] == '%' || out[i - 1] == '#' || out[i - 1] == '-') && i + 1 < out.size() &&
        out[i + 1] == '\n')
      ++i;
  }
  return trimmed;
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) : t_(hf_environment(source)) {}

  std::vector<Token> run() {
    bool strip_next = false;  // the previous tag ended with '-'
    while (pos_ < t_.size()) {
      size_t open = pos_;
      while ((open = t_.find('{', open)) != std::string::npos && open + 1 < t_.size() &&
             t_[open + 1] != '{' && t_[open + 1] != '%' && t_[open + 1] != '#')
        ++open;
      if (open == std::string::npos || open + 1 >= t_.size()) open = t_.size();
      std::string text = t_.substr(pos_, open - pos_);
      if (strip_next) text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r\f\v")));
      const bool strip_before = open + 2 < t_.size() && t_[open + 2] == '-';
      if (strip_before) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      if (!text.empty()) push(Token::text, text);
      count_lines(pos_, open);
      pos_ = open;
      if (pos_ >= t_.size()) break;
      const char kind = t_[pos_ + 1];
      pos_ += strip_before ? 3 : 2;
      if (kind == '#') {
        const size_t close = t_.find("#}", pos_);
        MT_CHECK(close != std::string::npos) << "chat template line " << line_ << ": a comment is not closed";
        strip_next = close > pos_ && t_[close - 1] == '-';
        count_lines(pos_, close + 2);
        pos_ = close + 2;
        continue;
      }
      push(kind == '{' ? Token::var_begin : Token::block_begin, "");
      strip_next = expression(kind == '{' ? "}}" : "%}");
      push(kind == '{' ? Token::var_end : Token::block_end, "");
    }
    push(Token::end, "");
    return std::move(tokens_);
  }

 private:
  void push(Token::Kind kind, std::string s) { tokens_.push_back({kind, std::move(s), line_}); }
  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < t_.size(); ++i) line_ += t_[i] == '\n';
  }

  // Tokens up to the closing `close` (optionally "-" before it); returns whether it had the "-".
  bool expression(const char* close) {
    for (;;) {
      while (pos_ < t_.size() && is_space(t_[pos_])) line_ += t_[pos_++] == '\n';
      MT_CHECK(pos_ < t_.size()) << "chat template line " << line_ << ": a tag is not closed";
      if (t_.compare(pos_, 2, close) == 0) {
        pos_ += 2;
        return false;
      }
      if (t_[pos_] == '-' && t_.compare(pos_ + 1, 2, close) == 0) {
        pos_ += 3;
        return true;
      }
      const char c = t_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[e])) || t_[e] == '_')) ++e;
        push(Token::name, t_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos_;
        while (e < t_.size() && (std::isdigit(static_cast<unsigned char>(t_[e])) || t_[e] == '_')) ++e;
        const bool fraction = e + 1 < t_.size() && t_[e] == '.' && std::isdigit(static_cast<unsigned char>(t_[e + 1]));
        if (fraction) {
          ++e;
          while (e < t_.size() && std::isdigit(static_cast<unsigned char>(t_[e]))) ++e;
        }
        push(fraction ? Token::number : Token::integer, t_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        std::string s;
        size_t e = pos_ + 1;
        for (; e < t_.size() && t_[e] != c; ++e) {
          if (t_[e] != '\\' || e + 1 >= t_.size()) {
            s += t_[e];
            continue;
          }
          const char x = t_[++e];
          s += x == 'n' ? '\n' : x == 't' ? '\t' : x == 'r' ? '\r' : x;
        }
        MT_CHECK(e < t_.size()) << "chat template line " << line_ << ": a string is not closed";
        push(Token::string, s);
        pos_ = e + 1;
      } else {
        static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~",
                                    "|", ".", ",", ":", "(", ")", "[", "]", "{", "}", "="};
        const char* hit = nullptr;
        for (const char* op : ops)
          if (t_.compare(pos_, std::char_traits<char>::length(op), op) == 0) {
            hit = op;
            break;
          }
        MT_CHECK(hit) << "chat template line " << line_ << ": unexpected character '" << c << "'";
        push(Token::op, hit);
        pos_ += std::char_traits<char>::length(hit);
      }
    }
  }

  std::string t_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

NodePtr make(Node n) { return std::make_shared<const Node>(std::move(n)); }

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  NodePtr document() {
    std::string stop;
    NodePtr body = statements({}, stop);
    MT_CHECK(peek().kind == Token::end) << where() << "unexpected {% " << stop << " %}";
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  std::string where() const { return "chat template line " + std::to_string(peek().line) + ": "; }
  bool at_op(const char* op) const { return peek().kind == Token::op && peek().s == op; }
  bool at_name(const char* name) const { return peek().kind == Token::name && peek().s == name; }
  void expect_op(const char* op) {
    MT_CHECK(at_op(op)) << where() << "expected '" << op << "', found '" << peek().s << "'";
    next();
  }
  void expect_name(const char* name) {
    MT_CHECK(at_name(name)) << where() << "expected '" << name << "', found '" << peek().s << "'";
    next();
  }
  void expect(Token::Kind kind, const char* what) {
    MT_CHECK(peek().kind == kind) << where() << "expected " << what << ", found '" << peek().s << "'";
    next();
  }
  std::string identifier() {
    MT_CHECK(peek().kind == Token::name) << where() << "expected a name, found '" << peek().s << "'";
    return next().s;
  }

  // Statements until a block tag whose keyword is in `stops` (left unread but for the "{%"), whose
  // keyword goes to `stop`; or to the end.
  NodePtr statements(const std::set<std::string>& stops, std::string& stop) {
    Node body{Node::body};
    for (;;) {
      const Token& tok = peek();
      if (tok.kind == Token::end) break;
      if (tok.kind == Token::text) {
        Node n{Node::text};
        n.s = next().s;
        body.children.push_back(make(std::move(n)));
      } else if (tok.kind == Token::var_begin) {
        next();
        Node n{Node::output};
        n.line = tok.line;
        n.a = expression();
        expect(Token::var_end, "'}}'");
        body.children.push_back(make(std::move(n)));
      } else {
        next();  // {%
        const std::string keyword = peek().s;
        if (stops.count(keyword)) {
          stop = keyword;
          return make(std::move(body));
        }
        body.children.push_back(statement());
      }
    }
    MT_CHECK(stops.empty()) << where() << "the template ends inside a block (missing {% end... %})";
    return make(std::move(body));
  }

  NodePtr statement() {
    const int line = peek().line;
    const std::string keyword = identifier();
    std::string stop;
    if (keyword == "if") {
      Node n{Node::if_};
      n.line = line;
      for (;;) {
        n.children.push_back(expression());
        expect(Token::block_end, "'%}'");
        n.children.push_back(statements({"elif", "else", "endif"}, stop));
        next();
        if (stop == "elif") continue;
        if (stop == "else") {
          expect(Token::block_end, "'%}'");
          n.children.push_back(statements({"endif"}, stop));
          next();
        }
        break;
      }
      expect(Token::block_end, "'%}'");
      return make(std::move(n));
    }
    if (keyword == "for") {
      Node n{Node::for_};
      n.line = line;
      n.names.push_back(identifier());
      while (at_op(",")) {
        next();
        n.names.push_back(identifier());
      }
      expect_name("in");
      n.a = or_expression();
      if (at_name("if")) {
        next();
        n.b = expression();
      }
      MT_CHECK(!at_name("recursive")) << where() << "recursive loops are not implemented";
      expect(Token::block_end, "'%}'");
      n.children.push_back(statements({"else", "endfor"}, stop));
      next();
      if (stop == "else") {
        expect(Token::block_end, "'%}'");
        n.children.push_back(statements({"endfor"}, stop));
        next();
      }
      expect(Token::block_end, "'%}'");
      return make(std::move(n));
    }
    if (keyword == "set") {
      Node n{Node::set};
      n.line = line;
      std::string target = identifier();
      if (at_op(".")) {
        next();
        target += "." + identifier();
      }
      n.names.push_back(target);
      MT_CHECK(at_op("=")) << where() << "a {% set %} block (without '=') is not implemented";
      next();
      n.a = expression();
      expect(Token::block_end, "'%}'");
      return make(std::move(n));
    }
    MT_FAIL() << "chat template line " << line << ": {% " << keyword << " %} is not implemented";
  }

  // expression := or ['if' or ['else' expression]]
  NodePtr expression() {
    NodePtr value = or_expression();
    if (!at_name("if")) return value;
    next();
    Node n{Node::ternary};
    n.a = value;
    n.b = or_expression();
    if (at_name("else")) {
      next();
      n.c = expression();
    }
    return make(std::move(n));
  }

  NodePtr binary(std::string op, NodePtr a, NodePtr b) {
    Node n{Node::binary};
    n.s = std::move(op);
    n.a = std::move(a);
    n.b = std::move(b);
    return make(std::move(n));
  }

  NodePtr or_expression() {
    NodePtr left = and_expression();
    while (at_name("or")) {
      next();
      left = binary("or", left, and_expression());
    }
    return left;
  }
  NodePtr and_expression() {
    NodePtr left = not_expression();
    while (at_name("and")) {
      next();
      left = binary("and", left, not_expression());
    }
    return left;
  }
  NodePtr not_expression() {
    if (!at_name("not")) return comparison();
    next();
    Node n{Node::unary};
    n.s = "not";
    n.a = not_expression();
    return make(std::move(n));
  }
  NodePtr comparison() {
    NodePtr left = additive();
    for (;;) {
      if (peek().kind == Token::op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" || peek().s == ">" ||
                                       peek().s == "<=" || peek().s == ">=")) {
        const std::string op = next().s;
        left = binary(op, left, additive());
      } else if (at_name("in")) {
        next();
        left = binary("in", left, additive());
      } else if (at_name("not") && peek(1).kind == Token::name && peek(1).s == "in") {
        next();
        next();
        left = binary("not in", left, additive());
      } else {
        return left;
      }
    }
  }
  NodePtr additive() {
    NodePtr left = concat();
    while (at_op("+") || at_op("-")) {
      const std::string op = next().s;
      left = binary(op, left, concat());
    }
    return left;
  }
  NodePtr concat() {
    NodePtr left = multiplicative();
    while (at_op("~")) {
      next();
      left = binary("~", left, multiplicative());
    }
    return left;
  }
  NodePtr multiplicative() {
    NodePtr left = unary();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = next().s;
      left = binary(op, left, unary());
    }
    return left;
  }
  NodePtr unary() {
    if (at_op("-")) {
      next();
      Node n{Node::unary};
      n.s = "-";
      n.a = unary();
      return make(std::move(n));
    }
    return postfix(primary());
  }

  void arguments(Node& n) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == Token::name && peek(1).kind == Token::op && peek(1).s == "=") {
        const std::string key = next().s;
        next();
        n.kwargs.emplace_back(key, expression());
      } else {
        n.children.push_back(expression());
      }
      if (!at_op(",")) break;
      next();
    }
    expect_op(")");
  }

  NodePtr postfix(NodePtr value) {
    for (;;) {
      if (at_op(".")) {
        next();
        Node n{Node::attribute};
        n.a = value;
        n.s = identifier();
        value = make(std::move(n));
      } else if (at_op("[")) {
        next();
        NodePtr parts[3];
        int count = 0;
        bool sliced = false;
        for (;;) {
          if (!at_op(":") && !at_op("]")) parts[count] = expression();
          if (!at_op(":")) break;
          MT_CHECK(count < 2) << where() << "a slice has at most three parts";
          next();
          sliced = true;
          ++count;
        }
        expect_op("]");
        Node n{sliced ? Node::slice : Node::item};
        n.a = value;
        if (sliced) {
          n.children = {parts[0], parts[1], parts[2]};
        } else {
          n.b = parts[0];
        }
        value = make(std::move(n));
      } else if (at_op("(")) {
        Node n{Node::call};
        n.a = value;
        arguments(n);
        value = make(std::move(n));
      } else if (at_op("|")) {
        next();
        Node n{Node::filter};
        n.line = peek().line;
        n.a = value;
        n.s = identifier();
        if (at_op("(")) arguments(n);
        value = make(std::move(n));
      } else if (at_name("is")) {
        next();
        Node n{Node::test};
        n.line = peek().line;
        n.a = value;
        if (at_name("not")) {
          next();
          n.negated = true;
        }
        n.s = identifier();
        if (at_op("(")) {
          arguments(n);
        } else if (peek().kind == Token::string || peek().kind == Token::integer || peek().kind == Token::number) {
          n.children.push_back(primary());  // `is equalto 3`
        }
        value = make(std::move(n));
      } else {
        return value;
      }
    }
  }

  NodePtr primary() {
    const Token tok = next();
    Node n{Node::literal};
    n.line = tok.line;
    switch (tok.kind) {
      case Token::string: {
        std::string s = tok.s;
        while (peek().kind == Token::string) s += next().s;  // adjacent literals concatenate
        n.value = Value::of(s);
        return make(std::move(n));
      }
      case Token::integer: {
        std::string digits;
        for (const char c : tok.s)
          if (c != '_') digits += c;
        n.value = Value::of(static_cast<int64_t>(std::stoll(digits)));
        return make(std::move(n));
      }
      case Token::number:
        n.value = Value::of(std::stod(tok.s));
        return make(std::move(n));
      case Token::name:
        if (tok.s == "true" || tok.s == "True") n.value = Value::of(true);
        else if (tok.s == "false" || tok.s == "False") n.value = Value::of(false);
        else if (tok.s == "none" || tok.s == "None") n.value = Value::null();
        else {
          n.kind = Node::name;
          n.s = tok.s;
        }
        return make(std::move(n));
      case Token::op:
        if (tok.s == "(") {
          NodePtr inner = expression();
          if (at_op(",")) {  // a tuple: read as a list
            Node list{Node::list_};
            list.children.push_back(inner);
            while (at_op(",")) {
              next();
              if (at_op(")")) break;
              list.children.push_back(expression());
            }
            inner = make(std::move(list));
          }
          expect_op(")");
          return inner;
        }
        if (tok.s == "[" || tok.s == "{") {
          const bool is_dict = tok.s == "{";
          Node list{is_dict ? Node::dict_ : Node::list_};
          const char* close = is_dict ? "}" : "]";
          while (!at_op(close)) {
            list.children.push_back(expression());
            if (is_dict) {
              expect_op(":");
              list.children.push_back(expression());
            }
            if (!at_op(",")) break;
            next();
          }
          expect_op(close);
          return make(std::move(list));
        }
        break;
      default:
        break;
    }
    MT_FAIL() << "chat template line " << tok.line << ": unexpected '" << tok.s << "' in an expression";
  }

  std::vector<Token> t_;
  size_t i_ = 0;
};

}  // namespace

NodePtr parse(const std::string& source) { return Parser(Lexer(source).run()).document(); }

}  // namespace mt::jinja
