// Tool calls in a model's reply: the syntax each model family's chat template teaches, parsed
// back into OpenAI `tool_calls` (serve's chat endpoint with `tools`).
//
//   kimi_k2       <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
//                 <|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>
//                 (the call's id is functions.NAME:IDX, as the template writes it back)
//   kimi_k3       <|open|>tools<|sep|><|open|>call tool="NAME" index="N"<|sep|>
//                 (<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>)* or
//                 <|open|>json type="object"<|sep|>{json}<|close|>json<|sep|>
//                 <|close|>call<|sep|>...<|close|>tools<|sep|>
//   deepseek_v31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>
//                 ...<｜tool▁calls▁end｜>
//   qwen3         <tool_call>\n{"name": NAME, "arguments": {json}}\n</tool_call> (one per call)
//   json          the generic fallback: the whole reply is {"name", "arguments"}, a list of them,
//                 or {"tool_calls": [...]} (each entry may wrap them in "function")
// The syntax is chosen from the template's own text (tool_syntax_of). Text before the first call
// is the message content. A reply whose call section is malformed (unclosed, bad JSON, arguments
// that are not an object) is not a tool call: `found` is false and the whole text is content.
//
// Markers that are control tokens must reach the parser as text: tool_markers() lists them, and
// the caller renders those tokens with their text.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::core {

enum class ToolSyntax { json, kimi_k2, kimi_k3, deepseek_v31, qwen3 };
const char* to_string(ToolSyntax s);

ToolSyntax tool_syntax_of(std::string_view template_source);
// The marker texts of a syntax (empty for json).
std::span<const std::string_view> tool_markers(ToolSyntax s);

// One forced call (tool_choice "required" or a named function) in a family's own syntax, the
// one its template writes for an assistant's call, as parts for a grammar: marker texts (control
// tokens in the real vocabularies, which a grammar names by id), fixed text, and the slots for
// the function's name (raw, as a JSON string, or as a Kimi K3 attribute value) and its JSON
// arguments. For json it is the generic {"name": NAME, "arguments": {...}}.
struct ToolCallPart {
  enum class Kind { marker, text, name, name_json, name_attr, arguments };
  Kind kind;
  std::string_view text = {};  // marker and text
};
std::span<const ToolCallPart> forced_call_parts(ToolSyntax s);

struct ToolCall {
  std::string id;         // the model's own id (kimi_k2), else empty: the caller numbers them
  std::string name;
  std::string arguments;  // a JSON object, compact
};

struct ToolCallResult {
  bool found = false;
  std::string content;  // found: the text before the calls; else the whole text
  std::vector<ToolCall> calls;
};

ToolCallResult parse_tool_calls(ToolSyntax syntax, std::string_view text);

// The same for a stream: push() returns the text that is content for certain (it holds back a
// tail that may begin a call section, and everything from a section's start on); finish()
// parses what was held (content: what push() did not return).
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolSyntax syntax) : syntax_(syntax) {}
  std::string push(std::string_view text);
  ToolCallResult finish();

 private:
  ToolSyntax syntax_;
  std::string held_;
  bool in_call_ = false;
  bool decided_ = false;  // json: the first non-space character has been seen
};

}  // namespace sluice::core
