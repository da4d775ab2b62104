// ChatTemplate: OpenAI-style messages -> the prompt text a model was trained on, rendered from
// the GGUF's `tokenizer.chat_template` (Jinja, core/text/jinja.h) or from an override.
//
//   ChatTemplate t = ChatTemplate::for_model(model.gguf(), tokenizer, override_or_empty);
//   std::string prompt = t.apply(messages_json, /*add_generation_prompt=*/true);
//
// The override is a built-in name ("chatml": <|im_start|>role\ncontent<|im_end|>\n), a path to a
// Jinja file, or the template text itself. for_model() renders a one-message conversation once,
// so a template outside the supported subset is an error at start-up, not at the first request.
// As llama.cpp does, a BOS (EOS) text the template writes at the very start (end) is removed
// when the tokenizer adds that token itself, so the prompt never carries two.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/text/jinja.h"

namespace sluice::core {

class GgufFile;
class Tokenizer;

class ChatTemplate {
 public:
  // Without an override and without tokenizer.chat_template in the file: chatml, as llama-server
  // does, and notice() says so. Error(unsupported/invalid_argument) from the Jinja parser or the
  // trial render.
  static ChatTemplate for_model(const GgufFile& gguf, const Tokenizer& tokenizer, std::string_view override_spec);
  // `source` is Jinja text; bos/eos are the texts bound to bos_token/eos_token.
  ChatTemplate(std::string_view source, std::string bos, std::string eos, bool strip_bos, bool strip_eos);

  // messages: [{"role": ..., "content": ...}, ...]. `extra` adds variables (enable_thinking,
  // tools, ...). Error(invalid_argument) when the template raises.
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  const std::string& name() const { return name_; }
  // The Jinja text (serve reads the model's tool-call syntax from it, app/tool_calls.h).
  const std::string& source() const { return source_; }
  // One line for the user when a fallback was taken; empty otherwise.
  const std::string& notice() const { return notice_; }

 private:
  std::shared_ptr<const jinja::Template> tmpl_;
  std::string source_, bos_, eos_, name_, notice_;
  bool strip_bos_ = false, strip_eos_ = false;
};

// The built-in template text for a name ("chatml"), or empty.
std::string_view builtin_chat_template(std::string_view name);

}  // namespace sluice::core
