#include "model/list_expression.h"

#include <cctype>

#include "base/error.h"

namespace mt {

namespace {

// A value of the grammar: an integer or a list of integers.
struct Value {
  bool is_list = false;
  int64_t number = 0;
  std::vector<int64_t> list;
};

// expr := term ('+' term)* ; term := factor ('*' factor)* ; factor := int | '[' ints ']' | '(' expr ')'
class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Value parse() {
    Value v = expr();
    skip_spaces();
    check(pos_ == text_.size(), "unexpected '" + std::string(1, text_[std::min(pos_, text_.size() - 1)]) + "'");
    return v;
  }

 private:
  void skip_spaces() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) return ++pos_, true;
    return false;
  }
  void check(bool ok, const std::string& what) const {
    MT_CHECK(ok) << "'" << text_ << "' is not a list expression like ([0]*3+[1]*5): " << what << " at position "
                 << pos_;
  }

  Value expr() {
    Value v = term();
    while (eat('+')) {
      const Value r = term();
      check(v.is_list == r.is_list, "+ joins two lists or two integers");
      if (v.is_list) v.list.insert(v.list.end(), r.list.begin(), r.list.end());
      else v.number += r.number;
    }
    return v;
  }

  Value term() {
    Value v = factor();
    while (eat('*')) {
      const Value r = factor();
      check(!(v.is_list && r.is_list), "* takes a list and an integer");
      if (!v.is_list && !r.is_list) {
        v.number *= r.number;
        continue;
      }
      const Value& list = v.is_list ? v : r;
      const int64_t times = v.is_list ? r.number : v.number;
      check(times >= 0 && times * static_cast<int64_t>(list.list.size()) <= 1'000'000, "repeat count out of range");
      Value repeated{true, 0, {}};
      for (int64_t i = 0; i < times; ++i) repeated.list.insert(repeated.list.end(), list.list.begin(), list.list.end());
      v = repeated;
    }
    return v;
  }

  Value factor() {
    if (eat('(')) {
      Value v = expr();
      check(eat(')'), "missing ')'");
      return v;
    }
    if (eat('[')) {  // [a, b, ...], a trailing comma allowed as in Python
      Value v{true, 0, {}};
      while (!eat(']')) {
        v.list.push_back(integer());
        if (!eat(',')) {
          check(eat(']'), "missing ']'");
          break;
        }
      }
      return v;
    }
    return Value{false, integer(), {}};
  }

  int64_t integer() {
    skip_spaces();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) && pos_ - start < 9) ++pos_;
    check(pos_ > start, "expected an integer");
    return std::stoll(text_.substr(start, pos_ - start));
  }

  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<int64_t> evaluate_list_expression(const std::string& text) {
  MT_CHECK(!text.empty()) << "an empty list expression";
  const Value v = Parser(text).parse();
  MT_CHECK(v.is_list) << "'" << text << "' is an integer, not a list";
  return v.list;
}

}  // namespace mt
