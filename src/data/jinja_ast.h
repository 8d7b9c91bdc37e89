// Owns the Jinja subset's syntax tree and its runtime values, shared by the parser
// (jinja_parse.cpp) and the renderer (jinja_render.cpp). Internal to data/jinja.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mt::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict
using Function = std::function<Value(const std::vector<Value>& args, const std::vector<std::pair<std::string, Value>>& kwargs)>;

// Python-like values. Lists, dicts and namespaces are shared (assignment aliases, as in Python).
struct Value {
  enum Kind { undefined, none, boolean, integer, number, string, list, dict, function } kind = undefined;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  std::shared_ptr<List> l;
  std::shared_ptr<Dict> m;
  std::shared_ptr<Function> f;
  bool is_namespace = false;

  static Value of(bool v) { Value x; x.kind = boolean; x.b = v; return x; }
  static Value of(int64_t v) { Value x; x.kind = integer; x.i = v; return x; }
  static Value of(double v) { Value x; x.kind = number; x.d = v; return x; }
  static Value of(std::string v) { Value x; x.kind = string; x.s = std::move(v); return x; }
  static Value of(List v) { Value x; x.kind = list; x.l = std::make_shared<List>(std::move(v)); return x; }
  static Value of(Dict v) { Value x; x.kind = dict; x.m = std::make_shared<Dict>(std::move(v)); return x; }
  static Value null() { Value x; x.kind = none; return x; }
  static Value fn(Function f) { Value x; x.kind = function; x.f = std::make_shared<Function>(std::move(f)); return x; }

  // The entry `key` of a dict, or nullptr.
  const Value* find(const std::string& key) const {
    if (kind != dict) return nullptr;
    for (const auto& [k, v] : *m)
      if (k == key) return &v;
    return nullptr;
  }
};

struct Node;
using NodePtr = std::shared_ptr<const Node>;

struct Node {
  enum Kind {
    // Statements
    body,      // children: statements in order
    text,      // s: literal text
    output,    // a: the expression to print
    if_,       // children: (condition, body) pairs flattened; an odd last child is the else body
    for_,      // names: targets; a: iterable; b: filter or null; children[0]: body; children[1]: else body
    set,       // names: target (one name, or name.attr); a: value
    // Expressions
    literal,   // value
    name,      // s
    attribute, // a.s
    item,      // a[b]
    slice,     // a[b:c:d] in children (null for an absent part)
    call,      // a(children, kwargs)
    filter,    // s: name; a: input; children: args; kwargs
    test,      // s: name; a: input; negated; children: args
    unary,     // s: "not" or "-"; a
    binary,    // s: operator; a, b
    ternary,   // a if b else c (c may be null)
    list_,     // children
    dict_,     // children: key, value pairs flattened
  } kind;
  explicit Node(Kind k) : kind(k) {}
  std::string s;
  Value value;
  NodePtr a, b, c;
  std::vector<NodePtr> children;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  std::vector<std::string> names;
  bool negated = false;
  int line = 0;
};

// Parses a template (jinja_parse.cpp); mt::Error with the line for what it cannot read.
NodePtr parse(const std::string& source);

}  // namespace mt::jinja
