// Renders a parsed Jinja Program: scopes, loops, macros, filters, tests and methods.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "common/error.h"
#include "core/text/jinja.h"
#include "core/text/jinja_ast.h"

namespace sluice::core::jinja {

namespace {

using K = Value::Kind;

Error fail(int line, const std::string& what) {
  return Error(ErrorCode::invalid_argument, "chat template line " + std::to_string(line) + ": " + what);
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  auto in = [&](char c) { return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0 : chars.find(c) != std::string::npos; };
  size_t b = 0, e = s.size();
  if (left) while (b < e && in(s[b])) ++b;
  if (right) while (e > b && in(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  size_t p = 0;
  while ((p = s.find(from, p)) != std::string::npos) {
    s.replace(p, from.size(), to);
    p += to.size();
  }
  return s;
}

int64_t norm_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& ctx) {
    scopes_.emplace_back();
    for (auto it = ctx.begin(); it != ctx.end(); ++it) scopes_[0][it.key()] = Value::from_json(it.value());
  }

  void render(const Body& body, std::string& out) {
    for (const Node& n : body) {
      node(n, out);
      if (jump_ != Jump::none) return;  // break/continue unwinds to the enclosing loop
    }
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
      if (it->count("\x01macro-boundary")) break;  // a macro sees its own scope and the globals
    }
    auto g = scopes_[0].find(name);
    return g != scopes_[0].end() ? g->second : Value{};
  }

  void node(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::text: out += n.text; return;
      case Node::Kind::output: out += eval(*n.expr).str(); return;
      case Node::Kind::if_:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || eval(*cond).truthy()) {
            render(body, out);
            return;
          }
        }
        return;
      case Node::Kind::for_: loop(n, out); return;
      case Node::Kind::set: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          scopes_.back()[n.target] = std::move(v);
          return;
        }
        Value target = lookup(n.target);
        if (!target.is(K::dict)) throw fail(n.line, "cannot set attribute '" + n.attr + "' of " + target.type_name());
        target.set(n.attr, std::move(v));
        return;
      }
      case Node::Kind::break_:
      case Node::Kind::continue_:
        if (loop_depth_ == 0) throw fail(n.line, "'break' or 'continue' outside a loop");
        jump_ = n.kind == Node::Kind::break_ ? Jump::brk : Jump::cont;
        return;
      case Node::Kind::macro: {
        Value m;
        m.kind = K::macro;
        m.macro = n.macro.get();
        scopes_.back()[n.macro->name] = m;
        return;
      }
    }
  }

  void loop(const Node& n, std::string& out) {
    Value seq = eval(*n.expr);
    std::vector<Value> items;
    if (seq.is(K::list)) items = *seq.list;
    else if (seq.is(K::dict)) for (const auto& kv : *seq.dict) items.push_back(Value::string(kv.first));
    else if (seq.is(K::string)) for (char c : seq.s) items.push_back(Value::string(std::string(1, c)));
    else if (!seq.is(K::undefined) && !seq.is(K::none)) throw fail(n.line, std::string("cannot iterate over ") + seq.type_name());
    scopes_.emplace_back();
    if (n.loop_filter) {  // `for x in xs if cond`: loop indices count the kept items only
      std::vector<Value> kept;
      for (Value& v : items) {
        bind(n, v);
        if (eval(*n.loop_filter).truthy()) kept.push_back(std::move(v));
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      bind(n, items[static_cast<size_t>(k)]);
      Value info = Value::new_dict();
      info.set("index0", Value::integer(k));
      info.set("index", Value::integer(k + 1));
      info.set("revindex0", Value::integer(len - k - 1));
      info.set("revindex", Value::integer(len - k));
      info.set("first", Value::boolean(k == 0));
      info.set("last", Value::boolean(k == len - 1));
      info.set("length", Value::integer(len));
      info.set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value{});
      info.set("nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value{});
      scopes_.back()["loop"] = info;
      ++loop_depth_;
      render(n.body, out);
      --loop_depth_;
      const Jump j = jump_;
      jump_ = Jump::none;
      if (j == Jump::brk) break;
    }
    if (len == 0) render(n.else_body, out);
    scopes_.pop_back();
  }

  void bind(const Node& n, const Value& v) {
    if (n.loop_names.size() == 1) {
      scopes_.back()[n.loop_names[0]] = v;
      return;
    }
    if (!v.is(K::list) || v.list->size() != n.loop_names.size())
      throw fail(n.line, "cannot unpack " + std::string(v.type_name()) + " into " + std::to_string(n.loop_names.size()) + " names");
    for (size_t k = 0; k < n.loop_names.size(); ++k) scopes_.back()[n.loop_names[k]] = (*v.list)[k];
  }

  Value call_macro(const MacroDef& m, std::vector<Value> args, const std::vector<std::pair<std::string, Value>>& kwargs, int line) {
    Scope s;
    s["\x01macro-boundary"] = Value::none();
    for (size_t k = 0; k < m.params.size(); ++k) {
      if (k < args.size()) s[m.params[k]] = args[k];
      else if (m.defaults[k]) s[m.params[k]] = eval(*m.defaults[k]);
      else s[m.params[k]] = Value{};
    }
    for (const auto& [name, v] : kwargs) {
      if (std::find(m.params.begin(), m.params.end(), name) == m.params.end())
        throw fail(line, "macro '" + m.name + "' has no parameter '" + name + "'");
      s[name] = v;
    }
    scopes_.push_back(std::move(s));
    std::string out;
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;  // a macro body cannot break its caller's loop
    render(m.body, out);
    loop_depth_ = saved_depth;
    scopes_.pop_back();
    return Value::string(std::move(out));
  }

  // Evaluates args[first..] into positional values and keyword pairs.
  void eval_args(const Expr& e, size_t first, std::vector<Value>& pos, std::vector<std::pair<std::string, Value>>& kw) {
    const size_t n_kw = e.kwarg_names.size();
    const size_t n_pos = e.args.size() - first - n_kw;
    for (size_t k = 0; k < n_pos; ++k) pos.push_back(eval(*e.args[first + k]));
    for (size_t k = 0; k < n_kw; ++k) kw.emplace_back(e.kwarg_names[k], eval(*e.args[first + n_pos + k]));
  }

  static const Value& arg(const std::vector<Value>& a, size_t i, int line, const std::string& fn) {
    if (i >= a.size()) throw fail(line, fn + "() needs argument " + std::to_string(i + 1));
    return a[i];
  }

  Value method(const Value& obj, const std::string& name, const std::vector<Value>& a, int line) {
    if (obj.is(K::string)) {
      const std::string& s = obj.s;
      auto str_arg = [&](size_t i) -> std::string {
        const Value& v = arg(a, i, line, name);
        if (!v.is(K::string)) throw fail(line, name + "() needs a string");
        return v.s;
      };
      if (name == "startswith") { const std::string p = str_arg(0); return Value::boolean(s.compare(0, p.size(), p) == 0); }
      if (name == "endswith") {
        const std::string p = str_arg(0);
        return Value::boolean(s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0);
      }
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const std::string chars = a.empty() || a[0].is(K::none) ? "" : str_arg(0);
        return Value::string(strip_chars(s, chars, name != "rstrip", name != "lstrip"));
      }
      if (name == "upper" || name == "lower") {
        std::string r = s;
        for (char& c : r) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        return Value::string(r);
      }
      if (name == "title") {
        std::string r = s;
        bool start = true;
        for (char& c : r) {
          const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
          c = static_cast<char>(alpha && start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
          start = !alpha;
        }
        return Value::string(r);
      }
      if (name == "replace") return Value::string(replace_all(s, str_arg(0), str_arg(1)));
      if (name == "split") {
        Value out = Value::new_list();
        if (a.empty() || a[0].is(K::none)) {  // whitespace runs
          size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
            size_t j = i;
            while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            if (j > i) out.list->push_back(Value::string(s.substr(i, j - i)));
            i = j;
          }
          return out;
        }
        const std::string sep = str_arg(0);
        if (sep.empty()) throw fail(line, "split() with an empty separator");
        int64_t max_split = a.size() > 1 && a[1].is(K::integer) ? a[1].i : -1;
        size_t p = 0;
        for (;;) {
          const size_t q = max_split == 0 ? std::string::npos : s.find(sep, p);
          if (q == std::string::npos) break;
          out.list->push_back(Value::string(s.substr(p, q - p)));
          p = q + sep.size();
          if (max_split > 0) --max_split;
        }
        out.list->push_back(Value::string(s.substr(p)));
        return out;
      }
    } else if (obj.is(K::dict)) {
      if (name == "get") {
        const Value* v = obj.find(arg(a, 0, line, name).str());
        return v ? *v : (a.size() > 1 ? a[1] : Value::none());
      }
      if (name == "items" || name == "keys" || name == "values") {
        Value out = Value::new_list();
        for (const auto& [k, v] : *obj.dict) {
          if (name == "keys") { out.list->push_back(Value::string(k)); continue; }
          if (name == "values") { out.list->push_back(v); continue; }
          Value pair = Value::new_list();
          pair.list->push_back(Value::string(k));
          pair.list->push_back(v);
          out.list->push_back(pair);
        }
        return out;
      }
    } else if (obj.is(K::list)) {
      if (name == "append") {
        obj.list->push_back(arg(a, 0, line, name));
        return Value::none();
      }
      if (name == "pop") {
        const int64_t n = static_cast<int64_t>(obj.list->size());
        const int64_t i = norm_index(a.empty() ? -1 : arg(a, 0, line, name).i, n);
        if (i < 0 || i >= n) throw fail(line, "pop() from an empty list or index out of range");
        Value v = (*obj.list)[static_cast<size_t>(i)];
        obj.list->erase(obj.list->begin() + i);
        return v;
      }
      if (name == "index") {
        for (size_t k = 0; k < obj.list->size(); ++k)
          if (equal((*obj.list)[k], arg(a, 0, line, name))) return Value::integer(static_cast<int64_t>(k));
        throw fail(line, "index(): value not in list");
      }
    }
    throw fail(line, std::string(obj.type_name()) + " has no method '" + name + "'");
  }

  Value call(const Expr& e) {
    std::vector<Value> a;
    std::vector<std::pair<std::string, Value>> kw;
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::attr) {
      Value obj = eval(*callee.args[0]);
      eval_args(e, 1, a, kw);
      return method(obj, callee.name, a, e.line);
    }
    if (callee.kind == Expr::Kind::name) {
      const std::string& fn = callee.name;
      Value f = lookup(fn);
      eval_args(e, 1, a, kw);
      if (f.is(K::macro)) return call_macro(*f.macro, std::move(a), kw, e.line);
      if (fn == "namespace") {
        Value ns = Value::new_dict();
        for (auto& [k, v] : kw) ns.set(k, v);
        return ns;
      }
      if (fn == "raise_exception") throw fail(e.line, "the template refused the request: " + (a.empty() ? std::string() : a[0].str()));
      if (fn == "range") {
        int64_t lo = 0, hi = 0, step = 1;
        if (a.size() == 1) hi = a[0].i;
        else if (a.size() >= 2) { lo = a[0].i; hi = a[1].i; if (a.size() > 2) step = a[2].i; }
        if (step == 0 || std::abs((hi - lo) / step) > 1'000'000) throw fail(e.line, "range() too long or with step 0");
        Value out = Value::new_list();
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out.list->push_back(Value::integer(i));
        return out;
      }
      throw fail(e.line, "'" + fn + "' is not a function");
    }
    throw fail(e.line, "this expression cannot be called");
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> a;
    std::vector<std::pair<std::string, Value>> kw;
    eval_args(e, 1, a, kw);
    const std::string& f = e.name;
    if (f == "tojson") {
      for (const auto& [k, x] : kw)
        if (k == "indent" && !x.is(K::none)) throw fail(e.line, "tojson(indent=...) is outside the subset");
      return Value::string(v.to_json());
    }
    if (f == "string") return Value::string(v.str());
    if (f == "length" || f == "count") {
      if (v.is(K::string)) return Value::integer(static_cast<int64_t>(v.s.size()));
      if (v.is(K::list)) return Value::integer(static_cast<int64_t>(v.list->size()));
      if (v.is(K::dict)) return Value::integer(static_cast<int64_t>(v.dict->size()));
      throw fail(e.line, std::string("length of ") + v.type_name());
    }
    if (f == "trim") return Value::string(strip_chars(v.str(), "", true, true));
    if (f == "upper" || f == "lower") return method(Value::string(v.str()), f, {}, e.line);
    if (f == "replace") return method(Value::string(v.str()), "replace", a, e.line);
    if (f == "default" || f == "d") {
      const bool boolean = (a.size() > 1 && a[1].truthy());
      return (v.is(K::undefined) || (boolean && !v.truthy())) ? (a.empty() ? Value::string("") : a[0]) : v;
    }
    if (f == "join") {
      if (!v.is(K::list)) throw fail(e.line, std::string("join of ") + v.type_name());
      std::string out, sep = a.empty() ? "" : a[0].str();
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? sep : "") + (*v.list)[k].str();
      return Value::string(out);
    }
    if (f == "first" || f == "last") {
      if (!v.is(K::list)) throw fail(e.line, f + " of " + v.type_name());
      if (v.list->empty()) return Value{};
      return f == "first" ? v.list->front() : v.list->back();
    }
    if (f == "list") {
      if (v.is(K::list)) return v;
      Value out = Value::new_list();
      if (v.is(K::string)) for (char c : v.s) out.list->push_back(Value::string(std::string(1, c)));
      else if (v.is(K::dict)) for (const auto& kv : *v.dict) out.list->push_back(Value::string(kv.first));
      return out;
    }
    if (f == "items") return method(v, "items", {}, e.line);
    if (f == "dictsort") {  // pairs by key, case-insensitive as jinja2's default
      if (!v.is(K::dict)) throw fail(e.line, std::string("dictsort of ") + v.type_name());
      Value pairs = method(v, "items", {}, e.line);
      auto lower = [](std::string s) {
        for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return s;
      };
      std::stable_sort(pairs.list->begin(), pairs.list->end(), [&](const Value& a, const Value& b) {
        return lower((*a.list)[0].s) < lower((*b.list)[0].s);
      });
      return pairs;
    }
    if (f == "int") {
      if (v.is(K::number)) return Value::integer(static_cast<int64_t>(v.d));
      if (v.is_numeric()) return Value::integer(v.kind == K::boolean ? v.b : v.i);
      try { return Value::integer(std::stoll(v.str())); } catch (const std::exception&) { return Value::integer(0); }
    }
    throw fail(e.line, "unknown filter '" + f + "'");
  }

  Value test(const Expr& e) {
    Value v = eval(*e.args[0]);
    const std::string& t = e.name;
    bool r;
    if (t == "defined") r = !v.is(K::undefined);
    else if (t == "undefined") r = v.is(K::undefined);
    else if (t == "none") r = v.is(K::none);
    else if (t == "string") r = v.is(K::string);
    else if (t == "number") r = v.is(K::integer) || v.is(K::number);
    else if (t == "integer") r = v.is(K::integer);
    else if (t == "boolean") r = v.is(K::boolean);
    else if (t == "mapping") r = v.is(K::dict);
    else if (t == "iterable") r = v.is(K::list) || v.is(K::dict) || v.is(K::string);
    else if (t == "sequence") r = v.is(K::list) || v.is(K::string);
    else if (t == "true") r = v.is(K::boolean) && v.b;
    else if (t == "false") r = v.is(K::boolean) && !v.b;
    else if (t == "odd" || t == "even") r = v.is(K::integer) && (v.i % 2 != 0) == (t == "odd");
    else throw fail(e.line, "unknown test '" + t + "'");
    return Value::boolean(r != e.negate);
  }

  Value index(const Value& obj, const Value& key, int line) {
    if (obj.is(K::dict)) {
      const Value* v = obj.find(key.str());
      return v ? *v : Value{};
    }
    if ((obj.is(K::list) || obj.is(K::string)) && key.is(K::integer)) {
      const int64_t n = static_cast<int64_t>(obj.is(K::list) ? obj.list->size() : obj.s.size());
      const int64_t i = norm_index(key.i, n);
      if (i < 0 || i >= n) return Value{};
      return obj.is(K::list) ? (*obj.list)[static_cast<size_t>(i)] : Value::string(std::string(1, obj.s[static_cast<size_t>(i)]));
    }
    if (obj.is(K::undefined) || obj.is(K::none)) return Value{};
    throw fail(line, std::string("cannot index ") + obj.type_name() + " with " + key.type_name());
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    if (!obj.is(K::list) && !obj.is(K::string)) throw fail(e.line, std::string("cannot slice ") + obj.type_name());
    const int64_t n = static_cast<int64_t>(obj.is(K::list) ? obj.list->size() : obj.s.size());
    auto part = [&](int k) -> std::optional<int64_t> {
      if (!e.args[static_cast<size_t>(k)]) return std::nullopt;
      Value v = eval(*e.args[static_cast<size_t>(k)]);
      if (v.is(K::none)) return std::nullopt;
      if (!v.is(K::integer)) throw fail(e.line, "slice bounds must be integers");
      return v.i;
    };
    const int64_t step = part(3).value_or(1);
    if (step == 0) throw fail(e.line, "slice step cannot be zero");
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t i = *v < 0 ? *v + n : *v;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t lo = clamp(part(1), step > 0 ? 0 : n - 1), hi = clamp(part(2), step > 0 ? n : -1);
    Value out = obj.is(K::list) ? Value::new_list() : Value::string("");
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      if (obj.is(K::list)) out.list->push_back((*obj.list)[static_cast<size_t>(i)]);
      else out.s += obj.s[static_cast<size_t>(i)];
    }
    return out;
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") return Value::string(a.str() + b.str());
    if (op == "in" || op == "not in") {
      bool r = false;
      if (b.is(K::string) && a.is(K::string)) r = b.s.find(a.s) != std::string::npos;
      else if (b.is(K::list)) r = std::any_of(b.list->begin(), b.list->end(), [&](const Value& x) { return equal(x, a); });
      else if (b.is(K::dict)) r = b.find(a.str()) != nullptr;
      else if (!b.is(K::undefined) && !b.is(K::none)) throw fail(e.line, std::string("'in' on ") + b.type_name());
      return Value::boolean(r != (op == "not in"));
    }
    if (op == "+" && a.is(K::string) && b.is(K::string)) return Value::string(a.s + b.s);
    if (op == "+" && a.is(K::list) && b.is(K::list)) {
      Value out = Value::new_list();
      *out.list = *a.list;
      out.list->insert(out.list->end(), b.list->begin(), b.list->end());
      return out;
    }
    if (op == "*" && a.is(K::string) && b.is(K::integer)) {
      std::string out;
      for (int64_t k = 0; k < std::min<int64_t>(b.i, 1'000'000); ++k) out += a.s;
      return Value::string(out);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (a.is(K::string) && b.is(K::string)) c = a.s.compare(b.s);
      else if (a.is_numeric() && b.is_numeric()) c = a.as_double() < b.as_double() ? -1 : (a.as_double() > b.as_double());
      else throw fail(e.line, std::string("cannot compare ") + a.type_name() + " and " + b.type_name());
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (!a.is_numeric() || !b.is_numeric())
      throw fail(e.line, "'" + op + "' on " + a.type_name() + " and " + b.type_name());
    const bool ints = a.kind != K::number && b.kind != K::number;
    auto whole = [](const Value& v) { return v.kind == K::boolean ? int64_t{v.b} : v.i; };
    if (ints && op != "/") {
      const int64_t x = whole(a), y = whole(b);
      if ((op == "//" || op == "%") && y == 0) throw fail(e.line, "division by zero");
      if (op == "+") return Value::integer(x + y);
      if (op == "-") return Value::integer(x - y);
      if (op == "*") return Value::integer(x * y);
      if (op == "//") return Value::integer(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
      if (op == "%") return Value::integer(((x % y) + y) % y);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (y == 0) throw fail(e.line, "division by zero");
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") return Value::number(x - std::floor(x / y) * y);
    throw fail(e.line, "unknown operator '" + op + "'");
  }

  Value eval(const Expr& e) {
    if (++depth_ > 200) throw fail(e.line, "expressions nest too deeply");
    struct Guard { int& d; ~Guard() { --d; } } guard{depth_};
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::attr: {
        Value obj = eval(*e.args[0]);
        if (obj.is(K::dict)) {
          const Value* v = obj.find(e.name);
          return v ? *v : Value{};
        }
        return Value{};
      }
      case Expr::Kind::index: return index(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::Kind::slice: return slice(e);
      case Expr::Kind::call: return call(e);
      case Expr::Kind::filter: return filter(e);
      case Expr::Kind::test: return test(e);
      case Expr::Kind::unary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.is(K::integer)) return Value::integer(e.name == "-" ? -v.i : v.i);
        if (v.is(K::number)) return Value::number(e.name == "-" ? -v.d : v.d);
        throw fail(e.line, "unary '" + e.name + "' on " + v.type_name());
      }
      case Expr::Kind::binary: return binary(e);
      case Expr::Kind::ternary:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value{};
      case Expr::Kind::list: {
        Value out = Value::new_list();
        for (const auto& x : e.args) out.list->push_back(eval(*x));
        return out;
      }
      case Expr::Kind::dict: {
        Value out = Value::new_dict();
        for (size_t k = 0; k < e.keys.size(); ++k) out.set(eval(*e.keys[k]).str(), eval(*e.args[k]));
        return out;
      }
    }
    return Value{};
  }

  enum class Jump { none, brk, cont };
  std::vector<Scope> scopes_;
  int depth_ = 0;
  int loop_depth_ = 0;
  Jump jump_ = Jump::none;
};

}  // namespace

Template::Template(std::string_view source) : program_(std::make_unique<Program>(parse(source))) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context) const {
  Renderer r(context);
  std::string out;
  r.render(program_->body, out);
  return out;
}

}  // namespace sluice::core::jinja
