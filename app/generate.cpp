#include "app/generate.h"

#include <algorithm>
#include <chrono>

#include "app/grammar/grammar_matcher.h"
#include "common/error.h"
#include "core/engine.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

cache::CacheCounters counters(Engine& e) { return e.cache() ? e.cache()->stats().total : cache::CacheCounters{}; }


constexpr size_t kStopTextReserve = 4096;  // bytes of text a stop-string sequence holds without growing

}  // namespace

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::none: return "none";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::end_token: return "end_token";
    case StopReason::stop_string: return "stop_string";
    case StopReason::context_full: return "context_full";
    case StopReason::interrupted: return "interrupted";
  }
  return "none";
}

SequenceGenerator::SequenceGenerator(int64_t n_vocab, int64_t n_ctx) : n_vocab_(n_vocab), n_ctx_(n_ctx) {
  if (n_vocab <= 0 || n_ctx <= 0)
    throw Error(ErrorCode::invalid_argument, "a sequence needs a vocabulary and a context (n_vocab " +
                                                 std::to_string(n_vocab) + ", n_ctx " + std::to_string(n_ctx) + ")");
}

void SequenceGenerator::start(std::span<const int32_t> prompt, int64_t start_pos, const GenerateOptions& options,
                              const SamplerOptions& sampling) {
  if (start_pos < 0 || start_pos >= static_cast<int64_t>(prompt.size()))
    throw Error(ErrorCode::invalid_argument, "the prompt has " + std::to_string(prompt.size()) +
                                                 " tokens and none left to evaluate from position " +
                                                 std::to_string(start_pos));
  if (static_cast<int64_t>(prompt.size()) > n_ctx_)
    throw Error(ErrorCode::invalid_argument, "prompt of " + std::to_string(prompt.size()) +
                                                 " tokens is longer than the context of " + std::to_string(n_ctx_) +
                                                 " tokens (raise -c)");
  if ((options.end_tokens != EndTokens::none || !options.stop_strings.empty()) && !options.tokenizer)
    throw Error(ErrorCode::internal, "end tokens and stop strings need the model's tokenizer");
  sampler_.emplace(sampling, n_vocab_);
  for (int32_t t : prompt) sampler_->accept(t);
  o_ = options;
  text_.reset(o_.stop_strings);
  if (!o_.stop_strings.empty()) text_.reserve(kStopTextReserve);
  prompt_ = prompt;
  pos_ = start_pos;
  generated_ = 0;
  next_ = -1;
  reason_ = StopReason::none;
  state_ = State::prompt;
}

SequenceInput SequenceGenerator::next_input(size_t room) const {
  if (state_ == State::prompt) {
    const size_t at = static_cast<size_t>(pos_);
    const size_t n = std::min(prompt_.size() - at, room);
    return {prompt_.subspan(at, n), pos_, at + n == prompt_.size()};
  }
  if (state_ == State::decode || state_ == State::last) return {{&next_, static_cast<size_t>(room ? 1 : 0)}, pos_, state_ == State::decode};
  return {};
}

void SequenceGenerator::fed(size_t n) {
  pos_ += static_cast<int64_t>(n);
  if (state_ == State::last) state_ = State::done;
}

bool SequenceGenerator::is_end(int32_t token) const {
  switch (o_.end_tokens) {
    case EndTokens::none: return false;
    case EndTokens::eos: return token == o_.tokenizer->eos();
    case EndTokens::eog: return o_.tokenizer->is_eog(token);
  }
  return false;
}

void SequenceGenerator::stop(StopReason r, bool feed) {
  reason_ = r;
  state_ = feed ? State::last : State::done;
}

SampledToken SequenceGenerator::accept_logits(std::span<const float> row) {
  if (state_ != State::prompt && state_ != State::decode)
    throw Error(ErrorCode::internal, "accept_logits on a sequence that is not waiting for logits");
  if (state_ == State::prompt && pos_ != static_cast<int64_t>(prompt_.size()))
    throw Error(ErrorCode::internal, "accept_logits before the prompt's last token was fed");
  state_ = State::decode;
  if (o_.interrupt && o_.interrupt->load()) return stop(StopReason::interrupted, false), SampledToken{};
  if (o_.max_tokens >= 0 && generated_ >= o_.max_tokens) return stop(StopReason::max_tokens, false), SampledToken{};
  if (o_.room_before_sampling && pos_ >= n_ctx_) return stop(StopReason::context_full, false), SampledToken{};

  std::span<const uint8_t> allowed;
  if (o_.grammar) {
    if (o_.grammar->compute_mask() == 0) return stop(StopReason::end_token, false), SampledToken{};
    allowed = o_.grammar->mask();
  }
  const int32_t tok = sampler_->sample(row, allowed);
  if (o_.grammar) o_.grammar->accept(tok);
  sampler_->accept(tok);
  ++generated_;
  next_ = tok;
  const SampledToken out{tok, is_end(tok)};
  if (out.end) {
    stop(StopReason::end_token, o_.feed_end_token);
  } else if (!o_.stop_strings.empty() && (text_.push(o_.tokenizer->token_to_piece(tok, false)), text_.stopped())) {
    stop(StopReason::stop_string, false);
  } else if (pos_ >= n_ctx_) {
    stop(StopReason::context_full, false);
  } else if (o_.max_tokens >= 0 && generated_ >= o_.max_tokens) {
    stop(StopReason::max_tokens, o_.feed_last_token);
  }
  return out;
}

namespace {

// Feeds the prompt in chunks of n_batch; returns the last row.
std::span<const float> prefill(Engine& engine, SequenceGenerator& seq, GenerateObserver& obs, GenerateStats& st) {
  const bool all_rows = obs.wants_prompt_logits();
  const auto t0 = Clock::now();
  const size_t n_batch = static_cast<size_t>(engine.n_batch());
  const size_t n_vocab = static_cast<size_t>(engine.n_vocab());
  const int64_t first = seq.pos();
  std::span<const float> rows;
  for (;;) {
    const SequenceInput in = seq.next_input(n_batch);
    rows = engine.forward(in.tokens, in.pos, all_rows);
    obs.on_rows(rows);
    seq.fed(in.tokens.size());
    if (in.wants_logits) break;
  }
  st.prefilled_tokens = seq.pos() - first;
  st.prefill_seconds = since(t0);
  obs.on_prefill_end(st.prefill_seconds);
  return rows.last(n_vocab);
}

}  // namespace

GenerateStats generate(Engine& engine, SequenceGenerator& seq, GenerateObserver* observer) {
  GenerateObserver none;
  GenerateObserver& obs = observer ? *observer : none;
  if (!seq.prefilling()) throw Error(ErrorCode::internal, "generate() needs a started sequence");
  GenerateStats st;
  st.prompt_tokens = seq.prompt_tokens();
  const std::span<const float> last = prefill(engine, seq, obs, st);
  const cache::CacheCounters before = counters(engine);
  const auto t0 = Clock::now();
  SampledToken tok = seq.accept_logits(last);
  for (int64_t index = 0; tok.token >= 0; ++index) {
    obs.on_token(index, tok.token, tok.end);
    if (seq.done()) break;
    const SequenceInput in = seq.next_input(1);
    obs.on_decode_begin(index);
    const std::span<const float> row = engine.forward(in.tokens, in.pos, false);
    obs.on_decode_end(index);
    obs.on_rows(row);
    seq.fed(1);
    ++st.decoded;
    if (!in.wants_logits) break;
    tok = seq.accept_logits(row);
  }
  st.decode_seconds = since(t0);
  const cache::CacheCounters after = counters(engine);
  st.decode_hits = after.hits - before.hits;
  st.decode_misses = after.misses - before.misses;
  st.decode_bytes_read = after.bytes_read - before.bytes_read;
  st.decode_io_wait_ns = after.io_wait_ns - before.io_wait_ns;
  st.generated = seq.generated();
  st.reason = seq.reason();
  return st;
}

}  // namespace sluice::core
