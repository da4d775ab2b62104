// GBNF grammars (app/grammar/gbnf.h) for JSON output: a JSON Schema's common subset, any JSON
// object (response_format json_object), and a forced tool call in a family's syntax
// (app/tool_calls.h: forced_call_parts), which the same header's parser reads back.
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

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "app/tool_calls.h"

namespace sluice::core {

std::string json_schema_gbnf(const nlohmann::ordered_json& schema);
std::string json_object_gbnf();
// Each of `tools` is {"type": "function", "function": {"name", "parameters"?}}; the call must be
// to `only_name` when it is not empty (tool_choice naming a function), else to any of them. The
// call is written as `parts` lay it out; `marker` gives the GBNF item of a marker text (a token
// reference, <[id]>, where the vocabulary holds the marker as one control token).
using MarkerItem = std::function<std::string(std::string_view marker)>;
std::string tool_call_gbnf(const nlohmann::ordered_json& tools, const std::string& only_name,
                           std::span<const ToolCallPart> parts, const MarkerItem& marker);

}  // namespace sluice::core
