#include "app/chat_session.h"

#include "app/generate.h"

#include <algorithm>

#include "common/error.h"
#include "core/text/chat_prompt.h"
#include "core/text/chat_template.h"
#include "core/engine.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

namespace {

// The answer as it streams: every sampled token (for the cache) and the text of those that are
// not the end of the turn.
struct ChatAnswer final : GenerateObserver {
  ChatAnswer(const Tokenizer& tokenizer, const std::function<void(const std::string&)>& on_text)
      : tokenizer(tokenizer), on_text(on_text) {}
  void on_token(int64_t, int32_t token, bool end) override {
    tokens.push_back(token);
    if (end) return;
    const std::string piece = tokenizer.token_to_piece(token, false);
    text += piece;
    on_text(piece);
  }
  const Tokenizer& tokenizer;
  const std::function<void(const std::string&)>& on_text;
  std::vector<int32_t> tokens;
  std::string text;
};

}  // namespace

ChatSession::ChatSession(Engine& engine, const Tokenizer& tokenizer, const ChatTemplate& chat, const SamplerOptions& sampling,
                         bool special_in_content)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_(chat),
      sampling_(sampling),
      special_in_content_(special_in_content),
      seq_(engine.n_vocab(), engine.n_ctx()) {}

void ChatSession::reset() {
  messages_ = nlohmann::ordered_json::array();
  cached_text_.clear();
  if (!system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
  cached_.clear();
}

void ChatSession::set_system(const std::string& text) {
  system_ = text;
  reset();
}

ChatTurnStats ChatSession::say(const std::string& user_text, int64_t max_tokens,
                               const std::function<void(const std::string&)>& on_text, const std::atomic<bool>& stop) {
  ChatTurnStats st;
  nlohmann::ordered_json next = messages_;
  next.push_back({{"role", "user"}, {"content", user_text}});
  const ChatPrompt rendered = render_chat_prompt(chat_, tokenizer_, next, true, nlohmann::ordered_json::object(),
                                                 special_in_content_);
  const std::string& text = rendered.text;

  // As llama.cpp's chat does: when the new rendering extends the text the cache holds, only the
  // extension is tokenized and appended (the answers stay the tokens that were generated, never
  // re-tokenized). Otherwise (a template that rewrites history) the whole text is tokenized and
  // the matching cached prefix kept; a recurrent state cannot rewind, so it keeps all or none.
  std::vector<int32_t> prompt;
  size_t keep = 0;
  if (!cached_.empty() && text.size() > cached_text_.size() && text.compare(0, cached_text_.size(), cached_text_) == 0) {
    keep = cached_.size();
    prompt = cached_;
    // The user's text lies in the extension: its literal offsets, made relative to it.
    std::vector<size_t> literal_at;
    for (size_t at : rendered.literal_at)
      if (at >= cached_text_.size()) literal_at.push_back(at - cached_text_.size());
    const std::vector<int32_t> add =
        tokenizer_.encode_guarded(std::string_view(text).substr(cached_text_.size()), false, literal_at);
    prompt.insert(prompt.end(), add.begin(), add.end());
  } else {
    prompt = tokenizer_.encode_guarded(text, true, rendered.literal_at);
    while (keep < cached_.size() && keep < prompt.size() && cached_[keep] == prompt[keep]) ++keep;
    if (!engine_.session().can_rewind() && keep < cached_.size()) keep = 0;
  }
  if (keep == prompt.size()) --keep;  // the last prompt token must be computed for its logits
  const int64_t n_ctx = engine_.n_ctx();
  if (static_cast<int64_t>(prompt.size()) >= n_ctx)
    throw Error(ErrorCode::invalid_argument, "the conversation is " + std::to_string(prompt.size()) +
                                                 " tokens, the context holds " + std::to_string(n_ctx) +
                                                 ": /reset to start over, or raise -c");
  messages_ = std::move(next);
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  cached_.resize(keep);
  cached_text_ = text;

  turn_prompt_ = prompt;
  // Every sampled token is fed, the end-of-turn one too: the cache then stands for the answer and
  // its end, and the next turn's markers follow them.
  GenerateOptions go{.max_tokens = max_tokens, .end_tokens = EndTokens::eog, .tokenizer = &tokenizer_,
                     .feed_end_token = true, .feed_last_token = true, .room_before_sampling = true, .interrupt = &stop};
  seq_.start(prompt, static_cast<int64_t>(keep), go, sampling_);
  ChatAnswer answer(tokenizer_, on_text);
  GenerateStats g;
  try {
    g = generate(engine_, seq_, &answer);
  } catch (...) {  // the cache no longer stands for known tokens: the next turn prefills anew
    cached_.clear();
    cached_text_.clear();
    throw;
  }
  cached_ = prompt;
  cached_.insert(cached_.end(), answer.tokens.begin(), answer.tokens.end());
  cached_text_ += answer.text;
  if (g.reason == StopReason::end_token) cached_text_ += tokenizer_.token_text(answer.tokens.back());
  st.prefilled_tokens = g.prefilled_tokens;
  st.prefill_seconds = g.prefill_seconds;
  st.generated_tokens = g.generated - (g.reason == StopReason::end_token ? 1 : 0);
  st.interrupted = g.reason == StopReason::interrupted;
  st.context_full = g.reason == StopReason::context_full;
  st.decode_seconds = g.decode_seconds;
  st.cache_hits = g.decode_hits;
  st.cache_misses = g.decode_misses;
  st.bytes_read = g.decode_bytes_read;
  messages_.push_back({{"role", "assistant"}, {"content", answer.text}});
  return st;
}

}  // namespace sluice::core
