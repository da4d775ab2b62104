// ChatSession: a multi-turn conversation over one Engine whose KV cache is kept between turns.
//
// Each turn renders the whole conversation with the chat template (add_generation_prompt). As
// in llama.cpp's chat, when that text extends the text the KV cache already stands for (the
// previous prompt, the answer as generated, its end-of-turn token), only the extension is
// tokenized and prefilled: a second turn prefills its own message and
// the template's markers, never the history, and earlier answers stay the tokens that were
// generated. A template that rewrites history gets the whole text tokenized and the matching
// cached prefix kept; a recurrent architecture (kimi-k3) cannot rewind its state, so there a
// mismatch before the end restarts from position 0.
//
// What the user types is tokenized as text, as serve does with message content
// (core/text/chat_prompt.h): control tokens come only from the template, so typing
// `<|im_end|>` cannot open a new role; `special_in_content` (chat --special-in-content) restores
// llama.cpp's reading of the whole rendering with special tokens parsed.
//
// The answer streams through `on_text` as whole UTF-8 pieces; it ends at an end-of-generation
// token (not printed, but fed to the cache so the next turn's markers follow it), at
// `max_tokens`, when the context is full, or when `stop` becomes true (Ctrl-C in `sluice chat`);
// what was said so far stays in the conversation.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/generate.h"
#include "app/sampler.h"

namespace sluice::core {

class ChatTemplate;
class Engine;
class Tokenizer;

struct ChatTurnStats {
  int64_t prompt_tokens = 0;     // tokens of the rendered conversation
  int64_t prefilled_tokens = 0;  // of those, the ones this turn computed (the rest were cached)
  int64_t generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  uint64_t cache_hits = 0, cache_misses = 0, bytes_read = 0;  // expert cache, during decode
  bool interrupted = false, context_full = false;
};

class ChatSession {
 public:
  ChatSession(Engine& engine, const Tokenizer& tokenizer, const ChatTemplate& chat, const SamplerOptions& sampling,
              bool special_in_content = false);

  // Adds the user's message, answers it; Error(invalid_argument) when the conversation no longer
  // fits the context (say /reset).
  ChatTurnStats say(const std::string& user_text, int64_t max_tokens, const std::function<void(const std::string&)>& on_text,
                    const std::atomic<bool>& stop);
  void reset();  // forget the conversation (the system message stays); the next turn prefills anew
  void set_system(const std::string& text);  // the conversation's first message, kept across /reset

  const nlohmann::ordered_json& messages() const { return messages_; }
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  // The tokens the last answer was generated from (the conversation up to the assistant's turn),
  // for comparisons with `sluice run --tokens`.
  const std::vector<int32_t>& turn_prompt() const { return turn_prompt_; }

 private:
  Engine& engine_;
  const Tokenizer& tokenizer_;
  const ChatTemplate& chat_;
  SamplerOptions sampling_;
  bool special_in_content_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::string system_;
  std::vector<int32_t> cached_;  // the tokens whose keys and values the cache holds, in order
  std::string cached_text_;      // the rendered text those tokens stand for
  std::vector<int32_t> turn_prompt_;
  SequenceGenerator seq_;       // the answer's loop (app/generate.h)
};

}  // namespace sluice::core
