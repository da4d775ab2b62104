// A small Jinja2 interpreter: the subset that model chat templates use (Kimi K2/K3,
// DeepSeek-V3, Qwen3, Mixtral), rendered as Hugging Face's apply_chat_template renders them
// (jinja2 with trim_blocks and lstrip_blocks; tojson as Python's json.dumps(ensure_ascii=False)).
//
// Supported:
//   statements  if/elif/else, for (one or two loop names, `if` filter, else, loop.index0/index/
//               first/last/length/revindex), set (names and namespace attributes), macro with
//               default arguments, break/continue (jinja2.ext.loopcontrols, which HF enables),
//               {# comments #}, whitespace control {%- -%} {{- -}}
//   expressions literals (strings, ints, floats, true/false/none in either case, lists, tuples
//               (as lists), dicts),
//               names, a.b, a[i], a[i:j:k], calls, filters (tojson, string, length, trim, upper,
//               lower, replace, default, join, first, last, list, items, dictsort, int), tests (defined,
//               undefined, none, string, number, integer, boolean, mapping, iterable, sequence,
//               true, false, odd, even), + - * / // % ~, comparisons, in / not in, and/or/not,
//               a if b else c
//   methods     str: startswith endswith split strip lstrip rstrip upper lower replace title;
//               dict: get items keys values; list: append pop index
//   globals     namespace(...), raise_exception(msg), range(n), and what the caller passes
// Anything else is Error(unsupported) at parse time naming the construct and line, so a template
// the server cannot render is refused at start-up, not at the first request.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sluice::core::jinja {

struct Program;  // the parsed template (jinja.cpp)

class Template {
 public:
  // Error(unsupported) for syntax outside the subset; Error(invalid_argument) for a malformed
  // template (unclosed tag, unbalanced block), each with the line number.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context`'s keys as global variables (messages, add_generation_prompt,
  // bos_token, ...). Error(invalid_argument) when the template raises (raise_exception) or
  // applies an operation to values it cannot take (naming the operation).
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace sluice::core::jinja
