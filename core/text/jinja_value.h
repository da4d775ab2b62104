// Values of the Jinja interpreter (core/text/jinja.h). Lists and dicts are shared references, as in
// Python, so `ns.ids.append(x)` and `set ns.v = ...` change what every holder sees. Dicts keep
// insertion order (tojson prints keys as the caller gave them, as json.dumps does).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::core::jinja {

struct Value;
struct MacroDef;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;

struct Value {
  enum class Kind { undefined, none, boolean, integer, number, string, list, dict, macro };
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  const MacroDef* macro = nullptr;

  static Value none() { return make(Kind::none); }
  static Value boolean(bool v) { Value x = make(Kind::boolean); x.b = v; return x; }
  static Value integer(int64_t v) { Value x = make(Kind::integer); x.i = v; return x; }
  static Value number(double v) { Value x = make(Kind::number); x.d = v; return x; }
  static Value string(std::string v) { Value x = make(Kind::string); x.s = std::move(v); return x; }
  static Value new_list() { Value x = make(Kind::list); x.list = std::make_shared<List>(); return x; }
  static Value new_dict() { Value x = make(Kind::dict); x.dict = std::make_shared<Dict>(); return x; }
  static Value from_json(const nlohmann::ordered_json& j);

  bool is(Kind k) const { return kind == k; }
  bool is_numeric() const { return kind == Kind::integer || kind == Kind::number || kind == Kind::boolean; }
  double as_double() const { return kind == Kind::number ? d : static_cast<double>(kind == Kind::boolean ? b : i); }
  bool truthy() const;
  // Python's str(): None, True, 3, 'text' unquoted; lists and dicts as Python repr.
  std::string str() const;
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False): separators ", " and ": ".
  std::string to_json() const;
  const char* type_name() const;

  // Dict lookup; null when absent.
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);

 private:
  static Value make(Kind k) { Value x; x.kind = k; return x; }
};

bool equal(const Value& a, const Value& b);

}  // namespace sluice::core::jinja
