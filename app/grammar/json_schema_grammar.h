// GBNF grammars (app/grammar/gbnf.h) for JSON output: a JSON Schema's common subset, any JSON
// object (response_format json_object), and a forced tool call in the generic JSON form that
// app/tool_calls.h parses ({"name": ..., "arguments": {...}}).
//
// Schema subset: `type` (string, number, integer, boolean, null, object, array, or a list of
// them), `properties` with `required` (required properties in their declared order, then each
// optional one may follow in order), `items`, `enum`, `const`, `minLength`/`maxLength`,
// `minItems`/`maxItems`, nested to 32 levels. Annotations (title, description, examples,
// default, $schema, $id, $comment) and `additionalProperties: false` are accepted and change
// nothing. Anything else (pattern, format, $ref, anyOf, minimum, additionalProperties other
// than false, ...) is Error(invalid_argument) naming the keyword and where it is, e.g.
// `json_schema: 'pattern' is not supported (at $.properties.code)`.
//
// The output's layout is fixed so that a reply always ends: at most one space between tokens,
// numbers of at most 16 digits before and after the point and a 2-digit exponent. Strings and
// arrays without a maximum length are unbounded.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sluice::core {

std::string json_schema_gbnf(const nlohmann::ordered_json& schema);
std::string json_object_gbnf();
// Each of `tools` is {"type": "function", "function": {"name", "parameters"?}}; the call must be
// to `only_name` when it is not empty (tool_choice naming a function), else to any of them.
std::string tool_call_gbnf(const nlohmann::ordered_json& tools, const std::string& only_name);

}  // namespace sluice::core
