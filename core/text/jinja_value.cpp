#include "core/text/jinja_value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sluice::core::jinja {

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value v = new_list();
      for (const auto& e : j) v.list->push_back(from_json(e));
      return v;
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = new_dict();
      for (auto it = j.begin(); it != j.end(); ++it) v.dict->emplace_back(it.key(), from_json(it.value()));
      return v;
    }
    default: return none();
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return b;
    case Kind::integer: return i != 0;
    case Kind::number: return d != 0;
    case Kind::string: return !s.empty();
    case Kind::list: return !list->empty();
    case Kind::dict: return !dict->empty();
    case Kind::macro: return true;
  }
  return false;
}

namespace {

std::string float_str(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  char buf[32];
  for (int prec = 1; prec <= 17; ++prec) {  // shortest repr that reads back, as Python prints
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string py_quote(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + q;
}

}  // namespace

std::string Value::str() const {
  switch (kind) {
    case Kind::undefined: return "";
    case Kind::string: return s;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return b ? "True" : "False";
    case Kind::integer: return std::to_string(i);
    case Kind::number: return float_str(d);
    case Kind::string: return py_quote(s);
    case Kind::list: {
      std::string out = "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? ", " : "") + (*list)[k].repr();
      return out + "]";
    }
    case Kind::dict: {
      std::string out = "{";
      for (size_t k = 0; k < dict->size(); ++k)
        out += (k ? ", " : "") + py_quote((*dict)[k].first) + ": " + (*dict)[k].second.repr();
      return out + "}";
    }
    case Kind::macro: return "<macro>";
  }
  return "";
}

std::string Value::to_json() const {
  switch (kind) {
    case Kind::undefined:
    case Kind::none: return "null";
    case Kind::boolean: return b ? "true" : "false";
    case Kind::integer: return std::to_string(i);
    case Kind::number: return std::isfinite(d) ? float_str(d) : (std::isnan(d) ? "NaN" : (d > 0 ? "Infinity" : "-Infinity"));
    case Kind::string: return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    case Kind::list: {
      std::string out = "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? ", " : "") + (*list)[k].to_json();
      return out + "]";
    }
    case Kind::dict: {
      std::string out = "{";
      for (size_t k = 0; k < dict->size(); ++k)
        out += (k ? ", " : "") + Value::string((*dict)[k].first).to_json() + ": " + (*dict)[k].second.to_json();
      return out + "}";
    }
    case Kind::macro: return "null";
  }
  return "null";
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::undefined: return "undefined";
    case Kind::none: return "none";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::number: return "float";
    case Kind::string: return "string";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::macro: return "macro";
  }
  return "?";
}

const Value* Value::find(const std::string& key) const {
  if (kind != Kind::dict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict->emplace_back(key, std::move(v));
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_numeric() && b.is_numeric()) {
    auto whole = [](const Value& v) { return v.kind == K::boolean ? int64_t{v.b} : v.i; };
    if (a.kind != K::number && b.kind != K::number) return whole(a) == whole(b);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::undefined:
    case K::none: return true;
    case K::string: return a.s == b.s;
    case K::list:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case K::dict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* o = b.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    case K::macro: return a.macro == b.macro;
    default: return false;
  }
}

}  // namespace sluice::core::jinja
