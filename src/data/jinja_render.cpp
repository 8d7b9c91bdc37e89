// Owns rendering the Jinja subset (see jinja.h): values from JSON, scopes (a for loop's body is
// its own scope, as in Jinja, so `namespace` carries state out), Python's operators, truthiness and
// printing, and the tests, filters, methods and globals chat templates use.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <optional>

#include "base/error.h"
#include "data/jinja.h"
#include "data/jinja_ast.h"

namespace mt {
namespace jinja {
namespace {

using Kwargs = std::vector<std::pair<std::string, Value>>;

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::null();
    case nlohmann::ordered_json::value_t::boolean: return Value::of(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::of(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::of(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::of(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& x : j) l.push_back(from_json(x));
      return Value::of(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.emplace_back(k, from_json(v));
      return Value::of(std::move(d));
    }
    default: return Value();
  }
}

// A scalar as JSON.
nlohmann::json scalar_json(const Value& v) {
  switch (v.kind) {
    case Value::boolean: return v.b;
    case Value::integer: return v.i;
    case Value::number: return v.d;
    case Value::string: return v.s;
    default: return nullptr;
  }
}

// JSON as Python's json.dumps(ensure_ascii=False) writes it (insertion order kept), with `indent`.
std::string dump_json(const Value& v, int indent, int depth = 0) {
  const std::string pad = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string close_pad = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* item_sep = indent > 0 ? "," : ", ";
  switch (v.kind) {
    case Value::list: {
      if (v.l->empty()) return "[]";
      std::string out = "[";
      for (size_t i = 0; i < v.l->size(); ++i) out += (i ? item_sep : "") + pad + dump_json((*v.l)[i], indent, depth + 1);
      return out + close_pad + "]";
    }
    case Value::dict: {
      if (v.m->empty()) return "{}";
      std::string out = "{";
      for (size_t i = 0; i < v.m->size(); ++i)
        out += (i ? item_sep : "") + pad + nlohmann::json((*v.m)[i].first).dump() + ": " +
               dump_json((*v.m)[i].second, indent, depth + 1);
      return out + close_pad + "}";
    }
    default:
      return scalar_json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string repr(const Value& v);

// How a value prints in {{ }} (Python's str()).
std::string str(const Value& v) {
  switch (v.kind) {
    case Value::undefined: return "";
    case Value::none: return "None";
    case Value::boolean: return v.b ? "True" : "False";
    case Value::integer: return std::to_string(v.i);
    case Value::number: return python_float(v.d);
    case Value::string: return v.s;
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::string: {
      const char quote = v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos ? '"' : '\'';
      std::string out(1, quote);
      for (const char c : v.s) {
        if (c == '\\' || c == quote) out += '\\';
        if (c == '\n') { out += "\\n"; continue; }
        out += c;
      }
      return out + quote;
    }
    case Value::list: {
      std::string out = "[";
      for (size_t i = 0; i < v.l->size(); ++i) out += (i ? ", " : "") + repr((*v.l)[i]);
      return out + "]";
    }
    case Value::dict: {
      std::string out = "{";
      for (size_t i = 0; i < v.m->size(); ++i)
        out += (i ? ", " : "") + repr(Value::of((*v.m)[i].first)) + ": " + repr((*v.m)[i].second);
      return out + "}";
    }
    case Value::function: return "<function>";
    default: return str(v);
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::undefined:
    case Value::none: return false;
    case Value::boolean: return v.b;
    case Value::integer: return v.i != 0;
    case Value::number: return v.d != 0;
    case Value::string: return !v.s.empty();
    case Value::list: return !v.l->empty();
    case Value::dict: return !v.m->empty();
    case Value::function: return true;
  }
  return false;
}

bool is_number(const Value& v) { return v.kind == Value::integer || v.kind == Value::number || v.kind == Value::boolean; }
double as_double(const Value& v) { return v.kind == Value::number ? v.d : v.kind == Value::boolean ? v.b : static_cast<double>(v.i); }
int64_t as_int(const Value& v) { return v.kind == Value::number ? static_cast<int64_t>(v.d) : v.kind == Value::boolean ? v.b : v.i; }

bool equal(const Value& a, const Value& b) {
  if (is_number(a) && is_number(b)) return as_double(a) == as_double(b);
  if (a.kind != b.kind) return (a.kind == Value::undefined || a.kind == Value::none) && (b.kind == Value::undefined || b.kind == Value::none) && a.kind == b.kind;
  switch (a.kind) {
    case Value::string: return a.s == b.s;
    case Value::list:
      return a.l->size() == b.l->size() && std::equal(a.l->begin(), a.l->end(), b.l->begin(), equal);
    case Value::dict: {
      if (a.m->size() != b.m->size()) return false;
      for (const auto& [k, x] : *a.m) {
        const Value* y = b.find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    }
    default: return true;
  }
}

// The items a for loop or a filter walks: a list's elements, a dict's keys, a string's characters.
List items_of(const Value& v, const std::string& what) {
  switch (v.kind) {
    case Value::undefined:
    case Value::none: return {};
    case Value::list: return *v.l;
    case Value::dict: {
      List keys;
      for (const auto& [k, x] : *v.m) keys.push_back(Value::of(k));
      return keys;
    }
    case Value::string: {
      List chars;
      for (size_t i = 0; i < v.s.size();) {
        size_t n = 1;
        const auto c = static_cast<unsigned char>(v.s[i]);
        if (c >= 0xF0) n = 4; else if (c >= 0xE0) n = 3; else if (c >= 0xC0) n = 2;
        chars.push_back(Value::of(v.s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    default: MT_FAIL() << "chat template: " << what << " cannot iterate over " << repr(v);
  }
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  const auto strip = [&](char c) { return chars.empty() ? (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') : chars.find(c) != std::string::npos; };
  if (left) while (b < e && strip(s[b])) ++b;
  if (right) while (e > b && strip(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

std::string title_case(const std::string& s, bool every_word) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (alpha) c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    start = every_word ? !alpha : false;
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

const Value& arg(const std::vector<Value>& args, size_t i) {
  static const Value missing;
  return i < args.size() ? args[i] : missing;
}
const Value* kwarg(const Kwargs& kwargs, const std::string& name) {
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

// A string's or dict's method, bound to it, or undefined.
Value method(const Value& self, const std::string& name) {
  if (self.kind == Value::string) {
    const std::string s = self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::fn([s, name](const std::vector<Value>& a, const Kwargs&) {
        const std::string chars = a.empty() || a[0].kind != Value::string ? "" : a[0].s;
        return Value::of(strip_chars(s, chars, name != "rstrip", name != "lstrip"));
      });
    if (name == "startswith" || name == "endswith")
      return Value::fn([s, name](const std::vector<Value>& a, const Kwargs&) {
        const std::string x = str(arg(a, 0));
        return Value::of(x.size() <= s.size() &&
                         (name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0));
      });
    if (name == "upper") return Value::fn([s](const std::vector<Value>&, const Kwargs&) { return Value::of(upper(s)); });
    if (name == "lower") return Value::fn([s](const std::vector<Value>&, const Kwargs&) { return Value::of(lower(s)); });
    if (name == "title") return Value::fn([s](const std::vector<Value>&, const Kwargs&) { return Value::of(title_case(s, true)); });
    if (name == "capitalize")
      return Value::fn([s](const std::vector<Value>&, const Kwargs&) { return Value::of(title_case(s, false)); });
    if (name == "replace")
      return Value::fn([s](const std::vector<Value>& a, const Kwargs&) { return Value::of(replace_all(s, str(arg(a, 0)), str(arg(a, 1)))); });
    if (name == "split")
      return Value::fn([s](const std::vector<Value>& a, const Kwargs&) {
        List parts;
        if (a.empty() || a[0].kind == Value::none) {  // on runs of white space
          for (size_t i = 0; i < s.size();) {
            while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
            size_t j = i;
            while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            if (j > i) parts.push_back(Value::of(s.substr(i, j - i)));
            i = j;
          }
          return Value::of(std::move(parts));
        }
        const std::string sep = str(a[0]);
        MT_CHECK(!sep.empty()) << "chat template: split with an empty separator";
        int64_t left = a.size() > 1 ? as_int(a[1]) : -1;
        size_t pos = 0;
        for (size_t hit; left != 0 && (hit = s.find(sep, pos)) != std::string::npos; pos = hit + sep.size(), --left)
          parts.push_back(Value::of(s.substr(pos, hit - pos)));
        parts.push_back(Value::of(s.substr(pos)));
        return Value::of(std::move(parts));
      });
  }
  if (self.kind == Value::dict) {
    const auto m = self.m;
    if (name == "items")
      return Value::fn([m](const std::vector<Value>&, const Kwargs&) {
        List out;
        for (const auto& [k, v] : *m) out.push_back(Value::of(List{Value::of(k), v}));
        return Value::of(std::move(out));
      });
    if (name == "keys" || name == "values")
      return Value::fn([m, name](const std::vector<Value>&, const Kwargs&) {
        List out;
        for (const auto& [k, v] : *m) out.push_back(name == "keys" ? Value::of(k) : v);
        return Value::of(std::move(out));
      });
    if (name == "get")
      return Value::fn([self](const std::vector<Value>& a, const Kwargs&) {
        const Value* v = self.find(str(arg(a, 0)));
        return v ? *v : a.size() > 1 ? a[1] : Value::null();
      });
  }
  return Value();
}

class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& context) {
    scopes_.emplace_back();
    Dict& globals = scopes_.back();
    globals.emplace_back("raise_exception", Value::fn([](const std::vector<Value>& a, const Kwargs&) -> Value {
      MT_FAIL() << "chat template: " << str(arg(a, 0));
    }));
    globals.emplace_back("namespace", Value::fn([](const std::vector<Value>&, const Kwargs& kw) {
      Value ns = Value::of(Dict(kw.begin(), kw.end()));
      ns.is_namespace = true;
      return ns;
    }));
    globals.emplace_back("range", Value::fn([](const std::vector<Value>& a, const Kwargs&) {
      const int64_t lo = a.size() > 1 ? as_int(a[0]) : 0, hi = as_int(a.size() > 1 ? a[1] : arg(a, 0));
      const int64_t step = a.size() > 2 ? as_int(a[2]) : 1;
      MT_CHECK(step != 0) << "chat template: range() with step 0";
      List out;
      for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out.push_back(Value::of(i));
      return Value::of(std::move(out));
    }));
    globals.emplace_back("strftime_now", Value::fn([](const std::vector<Value>& a, const Kwargs&) {
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, str(arg(a, 0)).c_str(), &tm);
      return Value::of(std::string(buf, n));
    }));
    scopes_.emplace_back();
    for (const auto& [k, v] : context.items()) scopes_.back().emplace_back(k, from_json(v));
  }

  void run(const Node& n) {
    switch (n.kind) {
      case Node::body:
        for (const NodePtr& c : n.children) run(*c);
        return;
      case Node::text: out_ += n.s; return;
      case Node::output: out_ += str(eval(*n.a)); return;
      case Node::if_:
        for (size_t i = 0; i + 1 < n.children.size(); i += 2)
          if (truthy(eval(*n.children[i]))) return run(*n.children[i + 1]);
        if (n.children.size() % 2 == 1) run(*n.children.back());
        return;
      case Node::for_: return run_for(n);
      case Node::set: {
        Value v = eval(*n.a);
        const std::string& target = n.names[0];
        const size_t dot = target.find('.');
        if (dot == std::string::npos) return assign(target, std::move(v));
        Value ns = lookup(target.substr(0, dot));
        MT_CHECK(ns.kind == Value::dict && ns.is_namespace)
            << "chat template line " << n.line << ": {% set " << target << " %} needs a namespace()";
        assign_in(*ns.m, target.substr(dot + 1), std::move(v));
        return;
      }
      default: MT_FAIL() << "chat template: a statement expected";
    }
  }

  std::string take() { return std::move(out_); }

 private:
  static void assign_in(Dict& d, const std::string& key, Value v) {
    for (auto& [k, x] : d)
      if (k == key) {
        x = std::move(v);
        return;
      }
    d.emplace_back(key, std::move(v));
  }
  void assign(const std::string& name, Value v) { assign_in(scopes_.back(), name, std::move(v)); }

  Value lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      for (const auto& [k, v] : *s)
        if (k == name) return v;
    return Value();
  }

  void run_for(const Node& n) {
    List all = items_of(eval(*n.a), "a for loop");
    List chosen;
    for (Value& item : all) {
      if (n.b) {
        scopes_.emplace_back();
        bind(n, item);
        const bool keep = truthy(eval(*n.b));
        scopes_.pop_back();
        if (!keep) continue;
      }
      chosen.push_back(std::move(item));
    }
    if (chosen.empty()) {
      if (n.children.size() > 1) run(*n.children[1]);
      return;
    }
    const auto length = static_cast<int64_t>(chosen.size());
    for (int64_t i = 0; i < length; ++i) {
      scopes_.emplace_back();
      bind(n, chosen[static_cast<size_t>(i)]);
      Dict loop = {{"index", Value::of(i + 1)},
                   {"index0", Value::of(i)},
                   {"revindex", Value::of(length - i)},
                   {"revindex0", Value::of(length - i - 1)},
                   {"first", Value::of(i == 0)},
                   {"last", Value::of(i == length - 1)},
                   {"length", Value::of(length)},
                   {"previtem", i > 0 ? chosen[static_cast<size_t>(i - 1)] : Value()},
                   {"nextitem", i + 1 < length ? chosen[static_cast<size_t>(i + 1)] : Value()}};
      assign("loop", Value::of(std::move(loop)));
      run(*n.children[0]);
      scopes_.pop_back();
    }
  }

  void bind(const Node& n, const Value& item) {
    if (n.names.size() == 1) return assign(n.names[0], item);
    const List parts = items_of(item, "a for loop's targets");
    MT_CHECK(parts.size() == n.names.size()) << "chat template line " << n.line << ": cannot unpack " << repr(item)
                                             << " into " << n.names.size() << " names";
    for (size_t k = 0; k < parts.size(); ++k) assign(n.names[k], parts[k]);
  }

  Value eval(const Node& n) {
    switch (n.kind) {
      case Node::literal: return n.value;
      case Node::name: return lookup(n.s);
      case Node::attribute: {
        const Value base = eval(*n.a);
        if (const Value* v = base.find(n.s)) return *v;
        return method(base, n.s);
      }
      case Node::item: return item(eval(*n.a), eval(*n.b));
      case Node::slice: return slice(n);
      case Node::call: {
        const Value f = eval(*n.a);
        std::vector<Value> args;
        for (const NodePtr& c : n.children) args.push_back(eval(*c));
        Kwargs kwargs;
        for (const auto& [k, c] : n.kwargs) kwargs.emplace_back(k, eval(*c));
        MT_CHECK(f.kind == Value::function) << "chat template: calling something that is not a function"
                                            << (n.a->kind == Node::name || n.a->kind == Node::attribute ? " (" + n.a->s + ")" : "");
        return (*f.f)(args, kwargs);
      }
      case Node::filter: return filter(n);
      case Node::test: {
        const bool result = test(n);
        return Value::of(n.negated ? !result : result);
      }
      case Node::unary: {
        const Value v = eval(*n.a);
        if (n.s == "not") return Value::of(!truthy(v));
        if (v.kind == Value::number) return Value::of(-v.d);
        return Value::of(-as_int(v));
      }
      case Node::binary: return binary(n);
      case Node::ternary: return truthy(eval(*n.b)) ? eval(*n.a) : n.c ? eval(*n.c) : Value();
      case Node::list_: {
        List l;
        for (const NodePtr& c : n.children) l.push_back(eval(*c));
        return Value::of(std::move(l));
      }
      case Node::dict_: {
        Dict d;
        for (size_t i = 0; i + 1 < n.children.size(); i += 2) assign_in(d, str(eval(*n.children[i])), eval(*n.children[i + 1]));
        return Value::of(std::move(d));
      }
      default: MT_FAIL() << "chat template: an expression expected";
    }
  }

  static Value item(const Value& base, const Value& key) {
    if (base.kind == Value::dict) {
      const Value* v = base.find(str(key));
      return v ? *v : method(base, str(key));
    }
    if ((base.kind == Value::list || base.kind == Value::string) && (key.kind == Value::integer || key.kind == Value::boolean)) {
      const List items = base.kind == Value::list ? *base.l : items_of(base, "an index");
      int64_t i = as_int(key);
      if (i < 0) i += static_cast<int64_t>(items.size());
      return i >= 0 && i < static_cast<int64_t>(items.size()) ? items[static_cast<size_t>(i)] : Value();
    }
    if (key.kind == Value::string) return method(base, key.s);
    return Value();
  }

  Value slice(const Node& n) {
    const Value base = eval(*n.a);
    const List items = items_of(base, "a slice");
    const auto size = static_cast<int64_t>(items.size());
    const auto part = [&](int k) -> std::optional<int64_t> {
      if (!n.children[static_cast<size_t>(k)]) return std::nullopt;
      const Value v = eval(*n.children[static_cast<size_t>(k)]);
      if (v.kind == Value::none) return std::nullopt;
      return as_int(v);
    };
    const int64_t step = part(2).value_or(1);
    MT_CHECK(step != 0) << "chat template: a slice with step 0";
    const auto clamp = [&](std::optional<int64_t> x, int64_t fallback) {
      if (!x) return fallback;
      int64_t v = *x < 0 ? *x + size : *x;
      return step > 0 ? std::clamp<int64_t>(v, 0, size) : std::clamp<int64_t>(v, -1, size - 1);
    };
    const int64_t lo = clamp(part(0), step > 0 ? 0 : size - 1), hi = clamp(part(1), step > 0 ? size : -1);
    List out;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out.push_back(items[static_cast<size_t>(i)]);
    if (base.kind != Value::string) return Value::of(std::move(out));
    std::string s;
    for (const Value& c : out) s += c.s;
    return Value::of(s);
  }

  Value binary(const Node& n) {
    const std::string& op = n.s;
    if (op == "and") {
      Value a = eval(*n.a);
      return truthy(a) ? eval(*n.b) : a;
    }
    if (op == "or") {
      Value a = eval(*n.a);
      return truthy(a) ? a : eval(*n.b);
    }
    const Value a = eval(*n.a), b = eval(*n.b);
    if (op == "~") return Value::of(str(a) + str(b));
    if (op == "==") return Value::of(equal(a, b));
    if (op == "!=") return Value::of(!equal(a, b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == Value::string) found = b.s.find(str(a)) != std::string::npos;
      else if (b.kind == Value::dict) found = b.find(str(a)) != nullptr;
      else for (const Value& x : items_of(b, "'in'")) found = found || equal(a, x);
      return Value::of(op == "in" ? found : !found);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.kind == Value::string && b.kind == Value::string) cmp = a.s.compare(b.s);
      else {
        MT_CHECK(is_number(a) && is_number(b)) << "chat template: cannot compare " << repr(a) << " " << op << " " << repr(b);
        cmp = as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
      }
      return Value::of(op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0);
    }
    if (op == "+" && a.kind == Value::string && b.kind == Value::string) return Value::of(a.s + b.s);
    if (op == "+" && a.kind == Value::list && b.kind == Value::list) {
      List l = *a.l;
      l.insert(l.end(), b.l->begin(), b.l->end());
      return Value::of(std::move(l));
    }
    if (op == "*" && a.kind == Value::string && b.kind == Value::integer) {
      std::string s;
      for (int64_t k = 0; k < b.i; ++k) s += a.s;
      return Value::of(s);
    }
    MT_CHECK(is_number(a) && is_number(b)) << "chat template: unsupported operands for " << op << ": " << repr(a) << ", " << repr(b);
    if (op == "/") return Value::of(as_double(a) / as_double(b));
    const bool floats = a.kind == Value::number || b.kind == Value::number;
    if (floats) {
      const double x = as_double(a), y = as_double(b);
      if (op == "+") return Value::of(x + y);
      if (op == "-") return Value::of(x - y);
      if (op == "*") return Value::of(x * y);
      if (op == "//") return Value::of(std::floor(x / y));
      if (op == "%") return Value::of(x - y * std::floor(x / y));
    }
    const int64_t x = as_int(a), y = as_int(b);
    if (op == "+") return Value::of(x + y);
    if (op == "-") return Value::of(x - y);
    if (op == "*") return Value::of(x * y);
    MT_CHECK(y != 0) << "chat template: division by zero";
    const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));  // Python's floor division
    if (op == "//") return Value::of(q);
    if (op == "%") return Value::of(x - q * y);
    MT_FAIL() << "chat template: the operator " << op << " is not implemented";
  }

  bool test(const Node& n) {
    const Value v = eval(*n.a);
    const std::string& t = n.s;
    std::vector<Value> args;
    for (const NodePtr& c : n.children) args.push_back(eval(*c));
    if (t == "defined") return v.kind != Value::undefined;
    if (t == "undefined") return v.kind == Value::undefined;
    if (t == "none") return v.kind == Value::none;
    if (t == "string") return v.kind == Value::string;
    if (t == "mapping") return v.kind == Value::dict;
    if (t == "number") return v.kind == Value::integer || v.kind == Value::number;
    if (t == "integer") return v.kind == Value::integer;
    if (t == "float") return v.kind == Value::number;
    if (t == "boolean") return v.kind == Value::boolean;
    if (t == "true") return v.kind == Value::boolean && v.b;
    if (t == "false") return v.kind == Value::boolean && !v.b;
    if (t == "callable") return v.kind == Value::function;
    if (t == "iterable") return v.kind == Value::list || v.kind == Value::dict || v.kind == Value::string;
    if (t == "sequence") return v.kind == Value::list || v.kind == Value::dict || v.kind == Value::string;
    if (t == "odd" || t == "even") return as_int(v) % 2 == (t == "odd" ? 1 : 0) || as_int(v) % 2 == (t == "odd" ? -1 : 0);
    if (t == "lower") return v.kind == Value::string && lower(v.s) == v.s;
    if (t == "upper") return v.kind == Value::string && upper(v.s) == v.s;
    if (t == "equalto" || t == "eq" || t == "sameas") return equal(v, arg(args, 0));
    if (t == "ne") return !equal(v, arg(args, 0));
    if (t == "in") {
      const Value& c = arg(args, 0);
      if (c.kind == Value::string) return c.s.find(str(v)) != std::string::npos;
      for (const Value& x : items_of(c, "'in'"))
        if (equal(v, x)) return true;
      return false;
    }
    MT_FAIL() << "chat template line " << n.line << ": the test '" << t << "' is not implemented";
  }

  bool passes(const Value& v, const std::string& test_name, const std::vector<Value>& args) {
    Node probe{Node::test};
    probe.s = test_name;
    Node literal{Node::literal};
    literal.value = v;
    probe.a = std::make_shared<const Node>(literal);
    for (const Value& a : args) {
      Node l{Node::literal};
      l.value = a;
      probe.children.push_back(std::make_shared<const Node>(l));
    }
    return test(probe);
  }

  Value filter(const Node& n) {
    const Value v = eval(*n.a);
    std::vector<Value> args;
    for (const NodePtr& c : n.children) args.push_back(eval(*c));
    Kwargs kwargs;
    for (const auto& [k, c] : n.kwargs) kwargs.emplace_back(k, eval(*c));
    const std::string& f = n.s;
    if (f == "trim") return Value::of(strip_chars(str(v), args.empty() ? "" : str(args[0]), true, true));
    if (f == "length" || f == "count") return Value::of(static_cast<int64_t>(items_of(v, f).size()));  // code points
    if (f == "tojson") {
      const Value* indent = kwarg(kwargs, "indent");
      return Value::of(dump_json(v, indent ? static_cast<int>(as_int(*indent)) : args.empty() ? 0 : static_cast<int>(as_int(args[0]))));
    }
    if (f == "string") return Value::of(str(v));
    if (f == "upper") return Value::of(upper(str(v)));
    if (f == "lower") return Value::of(lower(str(v)));
    if (f == "title") return Value::of(title_case(str(v), true));
    if (f == "capitalize") return Value::of(title_case(str(v), false));
    if (f == "first" || f == "last") {
      const List items = items_of(v, f);
      return items.empty() ? Value() : f == "first" ? items.front() : items.back();
    }
    if (f == "default" || f == "d") {
      const bool boolean = args.size() > 1 && truthy(args[1]);
      const bool use_default = v.kind == Value::undefined || (boolean && !truthy(v));
      return use_default ? arg(args, 0) : v;
    }
    if (f == "join") {
      std::string out;
      const std::string sep = args.empty() ? "" : str(args[0]);
      bool first = true;
      for (const Value& x : items_of(v, f)) {
        out += (first ? "" : sep) + str(x);
        first = false;
      }
      return Value::of(out);
    }
    if (f == "list") return Value::of(items_of(v, f));
    if (f == "reverse") {
      List items = items_of(v, f);
      std::reverse(items.begin(), items.end());
      if (v.kind != Value::string) return Value::of(std::move(items));
      std::string s;
      for (const Value& c : items) s += c.s;
      return Value::of(s);
    }
    if (f == "replace") return Value::of(replace_all(str(v), str(arg(args, 0)), str(arg(args, 1))));
    if (f == "items") return (*method(v, "items").f)({}, {});
    if (f == "int") return Value::of(v.kind == Value::string ? static_cast<int64_t>(std::atoll(v.s.c_str())) : as_int(v));
    if (f == "float") return Value::of(v.kind == Value::string ? std::atof(v.s.c_str()) : as_double(v));
    if (f == "abs") return v.kind == Value::number ? Value::of(std::fabs(v.d)) : Value::of(std::abs(as_int(v)));
    if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject") {
      const bool by_attr = f == "selectattr" || f == "rejectattr";
      const bool keep_if = f == "selectattr" || f == "select";
      const size_t test_at = by_attr ? 1 : 0;
      List out;
      for (const Value& x : items_of(v, f)) {
        const Value subject = by_attr ? (x.find(str(arg(args, 0))) ? *x.find(str(arg(args, 0))) : Value()) : x;
        const bool ok = args.size() > test_at ? passes(subject, str(args[test_at]), std::vector<Value>(args.begin() + static_cast<std::ptrdiff_t>(test_at) + 1, args.end()))
                                              : truthy(subject);
        if (ok == keep_if) out.push_back(x);
      }
      return Value::of(std::move(out));
    }
    if (f == "map") {
      const Value* attribute = kwarg(kwargs, "attribute");
      MT_CHECK(attribute) << "chat template line " << n.line << ": map is implemented with attribute= only";
      List out;
      for (const Value& x : items_of(v, f)) {
        const Value* y = x.find(str(*attribute));
        out.push_back(y ? *y : Value());
      }
      return Value::of(std::move(out));
    }
    MT_FAIL() << "chat template line " << n.line << ": the filter '" << f << "' is not implemented";
  }

  std::vector<Dict> scopes_;
  std::string out_;
};

}  // namespace
}  // namespace jinja

JinjaTemplate::JinjaTemplate(const std::string& source) : root_(jinja::parse(source)) {}
JinjaTemplate::~JinjaTemplate() = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  MT_CHECK(context.is_object()) << "chat template: the context must be a JSON object";
  jinja::Renderer r(context);
  r.run(*root_);
  return r.take();
}

}  // namespace mt
