#include "app/chat_session.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "core/text/chat_template.h"
#include "core/engine.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

cache::CacheCounters counters(Engine& e) { return e.cache() ? e.cache()->stats().total : cache::CacheCounters{}; }

}  // namespace

ChatSession::ChatSession(Engine& engine, const Tokenizer& tokenizer, const ChatTemplate& chat, const SamplerOptions& sampling)
    : engine_(engine), tokenizer_(tokenizer), chat_(chat), sampling_(sampling), last_(static_cast<size_t>(engine.n_vocab())) {}

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
  const std::string text = chat_.apply(next, true);

  // As llama.cpp's chat does: when the new rendering extends the text the cache holds, only the
  // extension is tokenized and appended (the answers stay the tokens that were generated, never
  // re-tokenized). Otherwise (a template that rewrites history) the whole text is tokenized and
  // the matching cached prefix kept; a recurrent state cannot rewind, so it keeps all or none.
  std::vector<int32_t> prompt;
  size_t keep = 0;
  if (!cached_.empty() && text.size() > cached_text_.size() && text.compare(0, cached_text_.size(), cached_text_) == 0) {
    keep = cached_.size();
    prompt = cached_;
    const std::vector<int32_t> add = tokenizer_.encode(std::string_view(text).substr(cached_text_.size()), false, true);
    prompt.insert(prompt.end(), add.begin(), add.end());
  } else {
    prompt = tokenizer_.encode(text, true, true);
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

  const auto t_prefill = Clock::now();
  const size_t n_batch = static_cast<size_t>(engine_.n_batch());
  for (size_t i = keep; i < prompt.size(); i += n_batch) {
    const size_t n = std::min(prompt.size() - i, n_batch);
    auto rows = engine_.forward({prompt.data() + i, n}, static_cast<int64_t>(i), false);
    std::copy(rows.end() - engine_.n_vocab(), rows.end(), last_.begin());
    cached_.insert(cached_.end(), prompt.begin() + static_cast<std::ptrdiff_t>(i), prompt.begin() + static_cast<std::ptrdiff_t>(i + n));
  }
  st.prefilled_tokens = static_cast<int64_t>(prompt.size() - keep);
  st.prefill_seconds = since(t_prefill);

  turn_prompt_ = prompt;
  Sampler sampler(sampling_, engine_.n_vocab());
  for (int32_t t : prompt) sampler.accept(t);
  std::string answer;
  int32_t ended_by = -1;  // the end-of-generation token, fed to the cache
  const cache::CacheCounters before = counters(engine_);
  const auto t_decode = Clock::now();
  for (;;) {
    if (stop.load()) {
      st.interrupted = true;
      break;
    }
    if (max_tokens >= 0 && st.generated_tokens >= max_tokens) break;
    if (static_cast<int64_t>(cached_.size()) >= n_ctx) {
      st.context_full = true;
      break;
    }
    const int32_t tok = sampler.sample(last_);
    sampler.accept(tok);
    const bool end = tokenizer_.is_eog(tok);
    if (!end) {
      ++st.generated_tokens;
      const std::string piece = tokenizer_.token_to_piece(tok, false);
      answer += piece;
      on_text(piece);
    }
    // The end-of-turn token goes into the cache too: the next turn's markers follow it.
    auto row = engine_.forward({&tok, 1}, static_cast<int64_t>(cached_.size()), false);
    cached_.push_back(tok);
    std::copy(row.begin(), row.end(), last_.begin());
    if (end) {
      ended_by = tok;
      break;
    }
  }
  cached_text_ += answer;
  if (ended_by >= 0) cached_text_ += tokenizer_.token_text(ended_by);
  st.decode_seconds = since(t_decode);
  const cache::CacheCounters after = counters(engine_);
  st.cache_hits = after.hits - before.hits;
  st.cache_misses = after.misses - before.misses;
  st.bytes_read = after.bytes_read - before.bytes_read;
  messages_.push_back({{"role", "assistant"}, {"content", answer}});
  return st;
}

}  // namespace sluice::core
