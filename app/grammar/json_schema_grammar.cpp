#include "app/grammar/json_schema_grammar.h"

#include <algorithm>
#include <set>

#include "app/grammar/gbnf.h"
#include "common/error.h"

namespace sluice::core {

namespace {

using nlohmann::ordered_json;

constexpr int kMaxDepth = 32;
constexpr int64_t kMaxCount = 4096;  // the GBNF parser's repetition bound

// The value grammar every schema may refer to; root is added by the caller.
constexpr const char* kJsonRules = R"(ws ::= " "?
json-char ::= [^"\\\x00-\x1F\x7F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ([0-9] | [1-9] [0-9]{0,15})
json-number ::= json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-member ::= json-string ws ":" ws json-value
json-object ::= "{" ws (json-member (ws "," ws json-member)*)? ws "}"
json-array ::= "[" ws (json-value (ws "," ws json-value)*)? ws "]"
)";

class SchemaGrammar {
 public:
  // A GBNF expression for `schema`; compound ones become rules of their own.
  std::string visit(const ordered_json& schema, const std::string& where, int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 32 levels", where);
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) fail("the schema 'false' accepts nothing", where);
      return "json-value";
    }
    if (!schema.is_object()) fail("a schema must be an object", where);
    static const std::set<std::string> kIgnored{"title", "description", "examples", "default", "$schema", "$id", "$comment"};
    static const std::set<std::string> kKnown{"type", "properties", "required", "items", "enum", "const",
                                              "minLength", "maxLength", "minItems", "maxItems", "additionalProperties"};
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (kIgnored.count(it.key())) continue;
      if (!kKnown.count(it.key())) fail("'" + it.key() + "' is not supported", where);
    }
    if (schema.contains("additionalProperties") && schema["additionalProperties"] != false)
      fail("'additionalProperties' other than false is not supported", where);
    if (schema.contains("const")) return gbnf_literal(schema["const"].dump());
    if (schema.contains("enum")) {
      const ordered_json& e = schema["enum"];
      if (!e.is_array() || e.empty()) fail("'enum' must be a non-empty array", where);
      std::string alts;
      for (const auto& v : e) alts += (alts.empty() ? "" : " | ") + gbnf_literal(v.dump());
      return rule(where, alts);
    }
    if (!schema.contains("type")) {
      if (schema.contains("properties")) return object(schema, where, depth);
      if (schema.contains("items")) return array(schema, where, depth);
      return "json-value";
    }
    const ordered_json& t = schema["type"];
    if (t.is_string()) return typed(t.get<std::string>(), schema, where, depth);
    if (!t.is_array() || t.empty()) fail("'type' must be a string or a non-empty array of strings", where);
    std::string alts;
    for (const auto& x : t) {
      if (!x.is_string()) fail("'type' must be a string or a non-empty array of strings", where);
      alts += (alts.empty() ? "" : " | ") + typed(x.get<std::string>(), schema, where, depth);
    }
    return rule(where, alts);
  }

  std::string rules() const { return rules_; }

  [[noreturn]] static void fail(const std::string& what, const std::string& where) {
    throw Error(ErrorCode::invalid_argument, "json_schema: " + what + " (at " + where + ")");
  }

 private:
  std::string rule(const std::string& where, const std::string& body) {
    std::string name = "s" + std::to_string(n_++) + "-";
    for (char c : where) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    rules_ += name + " ::= " + body + "\n";
    return name;
  }

  // An optional non-negative count keyword; -1 when absent.
  static int64_t count(const ordered_json& schema, const char* key, const std::string& where) {
    if (!schema.contains(key)) return -1;
    const ordered_json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxCount)
      fail(std::string("'") + key + "' must be an integer in [0, 4096]", where);
    return v.get<int64_t>();
  }

  static std::string repeat(int64_t min, int64_t max) {
    return "{" + std::to_string(min) + "," + (max < 0 ? "" : std::to_string(max)) + "}";
  }

  std::string typed(const std::string& type, const ordered_json& schema, const std::string& where, int depth) {
    if (type == "string") {
      const int64_t min = count(schema, "minLength", where), max = count(schema, "maxLength", where);
      if (min < 0 && max < 0) return "json-string";
      if (max >= 0 && max < std::max<int64_t>(min, 0)) fail("'maxLength' is below 'minLength'", where);
      return rule(where, "\"\\\"\" json-char" + repeat(std::max<int64_t>(min, 0), max) + " \"\\\"\"");
    }
    if (type == "number") return "json-number";
    if (type == "integer") return "json-integer";
    if (type == "boolean") return "json-boolean";
    if (type == "null") return "json-null";
    if (type == "object") return object(schema, where, depth);
    if (type == "array") return array(schema, where, depth);
    fail("unknown type '" + type + "'", where);
  }

  std::string object(const ordered_json& schema, const std::string& where, int depth) {
    if (!schema.contains("properties")) return "json-object";
    const ordered_json& props = schema["properties"];
    if (!props.is_object()) fail("'properties' must be an object", where);
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) fail("'required' must be an array of property names", where);
      for (const auto& r : schema["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>()))
          fail("'required' names " + r.dump() + ", which is not in 'properties'", where);
        required.insert(r.get<std::string>());
      }
    }
    std::vector<std::string> req, opt;
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string value = visit(it.value(), where + ".properties." + it.key(), depth + 1);
      const std::string kv = gbnf_literal(ordered_json(it.key()).dump()) + " ws \":\" ws " + value;
      (required.count(it.key()) ? req : opt).push_back(kv);
    }
    std::string body;
    if (!req.empty()) {
      for (size_t k = 0; k < req.size(); ++k) body += (k ? " ws \",\" ws " : "") + req[k];
      for (const std::string& kv : opt) body += " (ws \",\" ws " + kv + ")?";
    } else if (!opt.empty()) {
      // chain_k ::= kv_k (ws "," ws chain_k+1)? | chain_k+1: any ordered subset of the optional ones
      std::string next;
      for (size_t k = opt.size(); k-- > 0;)
        next = rule(where, next.empty() ? opt[k] : opt[k] + " (ws \",\" ws " + next + ")? | " + next);
      body = "(" + next + ")?";
    }
    return rule(where, "\"{\" ws " + (body.empty() ? std::string() : body + " ws ") + "\"}\"");
  }

  std::string array(const ordered_json& schema, const std::string& where, int depth) {
    const std::string item = schema.contains("items") ? visit(schema["items"], where + ".items", depth + 1) : "json-value";
    const int64_t min = std::max<int64_t>(count(schema, "minItems", where), 0), max = count(schema, "maxItems", where);
    if (max >= 0 && max < min) fail("'maxItems' is below 'minItems'", where);
    if (max == 0) return rule(where, "\"[\" ws \"]\"");
    const std::string more = "(ws \",\" ws " + item + ")" + repeat(std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1);
    const std::string items = item + " " + more;
    return rule(where, "\"[\" ws " + (min == 0 ? "(" + items + ")?" : items) + " ws \"]\"");
  }

  std::string rules_;
  int n_ = 0;
};

}  // namespace

std::string json_schema_gbnf(const ordered_json& schema) {
  SchemaGrammar g;
  const std::string root = g.visit(schema, "$", 0);
  return "root ::= " + root + "\n" + g.rules() + kJsonRules;
}

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kJsonRules; }

std::string tool_call_gbnf(const ordered_json& tools, const std::string& only_name, std::span<const ToolCallPart> parts,
                           const MarkerItem& marker) {
  using K = ToolCallPart::Kind;
  SchemaGrammar g;
  std::string alts;
  for (const auto& t : tools) {
    const ordered_json& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (!only_name.empty() && name != only_name) continue;
    const std::string where = "tool '" + name + "' parameters";
    const std::string args = f.contains("parameters") && !f["parameters"].is_null()
                                 ? g.visit(f["parameters"], where, 0)
                                 : "json-object";
    std::string attr = name;  // a Kimi K3 attribute value, escaped as its template escapes it
    for (size_t p = 0; (p = attr.find('&', p)) != std::string::npos; p += 5) attr.replace(p, 1, "&amp;");
    for (size_t p = 0; (p = attr.find('"', p)) != std::string::npos; p += 6) attr.replace(p, 1, "&quot;");
    std::string seq;
    for (const ToolCallPart& part : parts) {
      seq += seq.empty() ? "" : " ";
      switch (part.kind) {
        case K::marker: seq += marker(part.text); break;
        case K::text: seq += gbnf_literal(part.text); break;
        case K::name: seq += gbnf_literal(name); break;
        case K::name_json: seq += gbnf_literal(ordered_json(name).dump()); break;
        case K::name_attr: seq += gbnf_literal(attr); break;
        case K::arguments: seq += args; break;
      }
    }
    alts += (alts.empty() ? "" : " | ") + ("(" + seq + ")");
  }
  if (alts.empty()) SchemaGrammar::fail("no tool named '" + only_name + "'", "tools");
  return "root ::= " + alts + "\n" + g.rules() + kJsonRules;
}

}  // namespace sluice::core
