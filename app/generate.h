// The generate loop: prompt in chunks, then sample -> stop conditions -> feed, one token at a
// time, with the stats every command reports. It exists once, in two layers:
//
//   SequenceGenerator  one sequence's state machine, no forward pass of its own: the prompt still
//                      to feed (in chunks of up to `room` tokens), the sampler, the stop
//                      conditions and the count of sampled tokens. Whoever owns the session asks
//                      it for the next input, runs the forward pass, tells it what was fed and
//                      hands it the logits row of the last fed token.
//   generate()         the single-sequence driver over an Engine: run, bench and chat. It times
//                      prefill and decode, counts the expert cache over decode, and calls a
//                      GenerateObserver at fixed points for what differs between commands.
//
// serve's Scheduler (app/serve_scheduler.h) batches many sequences per forward pass, so it drives
// one SequenceGenerator per slot itself: decode inputs first, then prompt chunks in the room left
// under n_batch, then accept_logits() on each slot's row. Perplexity (app/perplexity.h) scores
// fixed chunks of a text and never samples; it is not a generation.
//
// What each command needs (the contract the options and hooks below are sized for):
//   run    prompt chunks of n_batch; all prompt rows with --logits-out (on_rows), one row per
//          decode step; each sampled token printed as it comes (on_token: the piece, or the id);
//          --stats' per-token line and live status line (on_decode_begin/on_decode_end);
//          Sampler with every option and the seed; stops at -n (the last token is still fed, so
//          --logits-out has n_prompt + n_generated rows), at the EOS id unless --ignore-eos
//          (counted, printed, not fed) and when the context is full (the token that has no
//          position is counted and printed, not fed); prompt and decode time; routing/trace
//          recording is the session's RoutingObserver, set before the loop.
//   bench  random prompt, greedy (Sampler at temperature 0 is argmax, ties to the lowest id),
//          exactly n_gen decode forwards, no end token; DecodeMeter marks around each decode
//          forward; snapshots of cache/prefetcher/GPU/exchange counters between prefill and
//          decode (on_prefill_end).
//   chat   prefill starts at the first token the KV cache does not hold (start_pos > 0); ends
//          at an end-of-generation token (not shown, not counted by chat, but fed so the next
//          turn's markers follow it), at -n, on Ctrl-C (interrupt), or when no position is left
//          for the next token (checked before sampling: every sampled token must be fed so the
//          cache matches the conversation); decode hit rate and MB/token (GenerateStats).
//   serve  per slot: the same state machine; end-of-generation tokens end the request (not
//          delivered, not fed), max_tokens and a full context end it without feeding the last
//          token; stop strings are cut on the HTTP side with the same TextStream
//          (app/text_stream.h), which ends the request early.
//   expert parallel (app/expert_parallel.h): every rank runs the same loop with the same sampler
//          seed, so the ranks' forward passes line up; only rank 0 prints (the caller's choice).
//
// Stop conditions, in the order they are checked. Before sampling: interrupt, max_tokens reached,
// and (room_before_sampling) no position left. After sampling: an end token, a stop string
// completed by the token's text, no position left for the token, max_tokens reached. A token that
// ends the sequence is fed when `feed_end_token` (end token) or `feed_last_token` (max_tokens)
// says so; a stop string or a full context never feeds it.
//
// Memory: SequenceGenerator is sized once (the Sampler's buffers per start(), as before); the
// per-token path allocates nothing unless stop strings are set (their text is detokenized).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "app/sampler.h"
#include "app/text_stream.h"

namespace sluice::core {

class Engine;
class GrammarMatcher;
class Tokenizer;

enum class StopReason { none, max_tokens, end_token, stop_string, context_full, interrupted };
const char* to_string(StopReason r);

enum class EndTokens { none, eos, eog };  // which ids end a sequence: none, Tokenizer::eos(), is_eog()

struct GenerateOptions {
  int64_t max_tokens = -1;  // sampled tokens at most; < 0: no limit
  EndTokens end_tokens = EndTokens::none;
  const Tokenizer* tokenizer = nullptr;  // needed for end tokens and stop strings; outlives the sequence
  std::vector<std::string> stop_strings = {};  // the text (token pieces) must not contain one
  bool feed_end_token = false;            // chat: the end-of-turn token goes into the KV cache
  bool feed_last_token = true;            // the token that reaches max_tokens is fed (serve: not)
  bool room_before_sampling = false;      // chat: stop before sampling when no position is left
  const std::atomic<bool>* interrupt = nullptr;  // checked before each sampling (Ctrl-C)
  // A constraint (serve's response_format, grammar, forced tool calls): started by the caller,
  // it masks every token it cannot accept before sampling and takes each sampled token. A state
  // where it allows no token ends the sequence as at an end token (nothing sampled).
  GrammarMatcher* grammar = nullptr;
};

// What accept_logits() did: the sampled token (-1: none, the sequence ended before sampling) and
// whether it is an end token. A sequence that ended keeps its reason in SequenceGenerator.
struct SampledToken {
  int32_t token = -1;
  bool end = false;
};

// The next tokens to feed at positions pos, pos + 1, ...; the logits of the last one are wanted
// (accept_logits) when `wants_logits` (the prompt's last token, or a sampled token).
struct SequenceInput {
  std::span<const int32_t> tokens;
  int64_t pos = 0;
  bool wants_logits = false;
};

class SequenceGenerator {
 public:
  SequenceGenerator(int64_t n_vocab, int64_t n_ctx);

  // Starts a sequence. Positions below start_pos already hold prompt[0, start_pos) (chat's cached
  // prefix); the rest of the prompt is fed from there. The sampler sees the whole prompt.
  // `prompt` must outlive the sequence. Error(invalid_argument): nothing left to feed, a prompt
  // longer than the context, bad sampler options.
  void start(std::span<const int32_t> prompt, int64_t start_pos, const GenerateOptions& options,
             const SamplerOptions& sampling);

  bool done() const { return state_ == State::done; }
  bool prefilling() const { return state_ == State::prompt; }
  StopReason reason() const { return reason_; }
  int64_t generated() const { return generated_; }  // tokens sampled (end tokens included)
  int64_t pos() const { return pos_; }              // the next position to feed
  int64_t prompt_tokens() const { return static_cast<int64_t>(prompt_.size()); }
  const std::string& text() const { return text_.text(); }  // with stop strings: the text before one

  // Up to `room` prompt tokens, or the sampled token; empty when done.
  SequenceInput next_input(size_t room) const;
  // The first n tokens of next_input() went through a forward pass.
  void fed(size_t n);
  // The logits row of the last fed token: checks the stop conditions, samples, checks again.
  SampledToken accept_logits(std::span<const float> row);

 private:
  enum class State { idle, prompt, decode, last, done };  // last: feed the token, then done
  void stop(StopReason r, bool feed);
  bool is_end(int32_t token) const;

  int64_t n_vocab_, n_ctx_;
  GenerateOptions o_;
  std::optional<Sampler> sampler_;
  TextStream text_;
  std::span<const int32_t> prompt_;
  State state_ = State::idle;
  StopReason reason_ = StopReason::none;
  int64_t pos_ = 0, generated_ = 0;
  int32_t next_ = -1;  // the sampled token still to feed
};

// Hooks of generate(), all optional; called on the caller's thread, in this order:
//   on_rows after each prompt chunk, on_prefill_end, then per sampled token on_token and, when the
//   token is fed, on_decode_begin / on_rows / on_decode_end around its forward pass.
class GenerateObserver {
 public:
  virtual ~GenerateObserver() = default;
  // Every prompt row's logits (run --logits-out); otherwise only the last row is computed.
  virtual bool wants_prompt_logits() const { return false; }
  // The logits rows of each forward pass: a prompt chunk's (all rows, or its last) and each
  // decode step's one row. Valid until the next forward pass.
  virtual void on_rows(std::span<const float> /*rows*/) {}
  virtual void on_prefill_end(double /*prefill_seconds*/) {}
  virtual void on_token(int64_t /*index*/, int32_t /*token*/, bool /*end*/) {}
  virtual void on_decode_begin(int64_t /*index*/) {}  // before feeding sampled token `index`
  virtual void on_decode_end(int64_t /*index*/) {}
};

struct GenerateStats {
  int64_t prompt_tokens = 0;   // the whole prompt
  int64_t prefilled_tokens = 0;  // of those, fed by this call (after start_pos)
  int64_t generated = 0;       // sampled tokens (end tokens included)
  int64_t decoded = 0;         // sampled tokens fed (decode forward passes)
  double prefill_seconds = 0;  // the prompt's forward passes
  double decode_seconds = 0;   // from the end of prefill to the end of the loop
  // The expert cache over decode (zero when in core): demand hits and misses, bytes read, wait.
  uint64_t decode_hits = 0, decode_misses = 0, decode_bytes_read = 0, decode_io_wait_ns = 0;
  StopReason reason = StopReason::none;
};

// The single-sequence loop over an Engine (sequence 0): seq must have been start()ed.
GenerateStats generate(Engine& engine, SequenceGenerator& seq, GenerateObserver* observer = nullptr);

}  // namespace sluice::core
