// A chat conversation as prompt tokens, with control tokens only where the chat template puts
// them: text a client sent (message content, names, tool definitions, template variables) is
// tokenized as text even when it spells a control token such as `<|im_end|>`, so no client can
// inject role markers.
//
// How: before rendering, every occurrence of a control or unknown token's text inside a string
// the client sent is preceded by a mark, U+FDD0 (a Unicode noncharacter, reserved here for this
// one use; a request whose text carries it is refused). The template moves the marks along with
// the text around them, through concatenation, slicing, strip and tojson. After rendering, the
// marks are taken out, their offsets kept, and Tokenizer::encode_guarded leaves every control
// token that covers one of those offsets as text. The prompt text itself is exactly what the
// template renders without marks.
//
// With `special_in_content` (serve --special-in-content) the whole rendered prompt is tokenized
// with special tokens parsed, as llama-server does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::core {

class ChatTemplate;
class Tokenizer;

// The mark, in UTF-8.
inline constexpr std::string_view kLiteralMark = "\xEF\xB7\x90";

struct ChatPrompt {
  std::string text;               // the rendered prompt, without marks
  std::vector<size_t> literal_at;  // offsets in `text` where a client's control-token text starts
  std::vector<int32_t> tokens;    // encode_guarded(text, true, literal_at)
};

// The rendered text and its literal offsets, `tokens` left empty (for a caller that tokenizes only
// part of the text, as `sluice chat` does with the extension of its cached conversation).
// Error(invalid_argument) when the template raises or a string carries U+FDD0.
ChatPrompt render_chat_prompt(const ChatTemplate& chat, const Tokenizer& tokenizer,
                              const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& extra, bool special_in_content);

// render_chat_prompt, then `tokens` = encode_guarded(text, true, literal_at).
ChatPrompt encode_chat_prompt(const ChatTemplate& chat, const Tokenizer& tokenizer,
                              const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& extra, bool special_in_content);

}  // namespace sluice::core
