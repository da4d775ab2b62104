#include "tools/serve_tool_calls.h"

#include <algorithm>

namespace sluice::tools {

ToolPieces::ToolPieces(const core::Tokenizer& tokenizer, core::ToolSyntax syntax) : tokenizer_(tokenizer) {
  for (std::string_view m : core::tool_markers(syntax))
    if (const int32_t id = tokenizer.find_token(m); id != core::kNullToken) markers_.push_back(id);
  std::sort(markers_.begin(), markers_.end());
}

std::string ToolPieces::piece(int32_t token, bool tools) const {
  const bool marker = tools && std::binary_search(markers_.begin(), markers_.end(), token);
  return tokenizer_.token_to_piece(token, marker);
}

nlohmann::ordered_json tool_calls_json(const std::vector<core::ToolCall>& calls, const std::string& request_id,
                                       bool streamed) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    nlohmann::ordered_json c = nlohmann::ordered_json::object();
    if (streamed) c["index"] = i;
    c["id"] = calls[i].id.empty() ? "call_" + request_id + "_" + std::to_string(i) : calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace sluice::tools
