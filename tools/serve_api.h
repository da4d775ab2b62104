// The OpenAI-compatible request and response bodies of `sluice serve` (tools/cmd_serve.cpp):
// parsing and checking requests, building completion objects and stream chunks, and turning
// token pieces into text that is safe to send (whole UTF-8 characters, stop strings held back).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/grammar/gbnf.h"
#include "app/grammar/json_schema_grammar.h"
#include "app/sampler.h"

namespace sluice::tools {

// A request error: the HTTP status and a one-line message for the JSON error body.
struct ApiError {
  int status;
  std::string message;
};

struct ApiRequest {
  bool chat = false;
  bool stream = false;
  std::string model;                      // as sent ("" when absent)
  nlohmann::ordered_json messages;        // chat: normalized (content as one string)
  nlohmann::ordered_json template_extra;  // chat: tools, chat_template_kwargs
  std::string prompt_text;                // completions: text prompt
  std::vector<int32_t> prompt_tokens;     // completions: token-id prompt
  int64_t max_tokens = 0;                 // 0: not given
  std::vector<std::string> stop;
  core::SamplerOptions sampling;
  bool cache_prompt = true;  // llama-server's "cache_prompt": false prefills the whole prompt
  // Agent options (parse_agent_options): top_logprobs >= 0 asks for log-probabilities (chat:
  // `logprobs: true` with `top_logprobs: N`; completions: `logprobs: N`); include_usage adds
  // the usage chunk to a stream (`stream_options.include_usage`).
  int top_logprobs = -1;
  bool include_usage = false;
  // Tools (parse_tool_options): the model's replies are parsed for tool calls when the request
  // declares `tools` and `tool_choice` is not "none". "required" and a named function force a
  // call: the grammar below makes the reply one call in the template family's own syntax
  // (ToolGrammar; arguments following the tool's parameter schema), parsed back as any reply.
  bool parse_tools = false;
  bool forced_tool_call = false;
  // The constraint on the reply (parse_constraints), null when none: `response_format`
  // ({"type": "json_object"}, optionally with llama-server's "schema", or {"type": "json_schema",
  // "json_schema": {"schema": ...}}), llama-server's `grammar` (GBNF) or `json_schema`, or a
  // forced tool call. At most one may be given.
  std::shared_ptr<const core::Grammar> grammar;
};

// How a forced tool call is written: the chat template's family (app/tool_calls.h) and the GBNF
// item of each of its markers (a token reference where the vocabulary has the marker as a token;
// a literal when `marker` is empty).
struct ToolGrammar {
  core::ToolSyntax syntax = core::ToolSyntax::json;
  core::MarkerItem marker;
};

// Parses and checks a body; std::nullopt and `error` set on a bad request (status 400).
std::optional<ApiRequest> parse_request(const std::string& body, bool chat, ApiError& error,
                                        const ToolGrammar& tool_grammar = {});

nlohmann::ordered_json error_body(int status, const std::string& message);

// The "usage" object of a response (and of a stream's usage chunk): token counts, with the prompt
// tokens taken from a slot's KV cache as prompt_tokens_details.cached_tokens (OpenAI's field).
nlohmann::ordered_json usage_body(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens);

// json.dump that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const nlohmann::ordered_json& j);

}  // namespace sluice::tools
