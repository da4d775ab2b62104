// Tool calls in serve's chat responses: the model's reply parsed by its family's syntax
// (app/tool_calls.h) into OpenAI's `tool_calls` entries, and the control tokens of that syntax
// rendered as text so that the parser sees them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/tool_calls.h"
#include "core/text/tokenizer.h"

namespace sluice::tools {

// Token pieces for replies that are parsed for tool calls: the syntax's marker tokens keep their
// text (token_to_piece without `special` would drop control tokens), every other token renders
// as usual.
class ToolPieces {
 public:
  ToolPieces(const core::Tokenizer& tokenizer, core::ToolSyntax syntax);
  std::string piece(int32_t token, bool tools) const;

 private:
  const core::Tokenizer& tokenizer_;
  std::vector<int32_t> markers_;  // sorted ids
};

// [{"id", "type": "function", "function": {"name", "arguments"}}, ...]; ids the model gave none
// are "call_<request>_<i>". In a stream each entry also carries its "index".
nlohmann::ordered_json tool_calls_json(const std::vector<core::ToolCall>& calls, const std::string& request_id,
                                       bool streamed);

}  // namespace sluice::tools
