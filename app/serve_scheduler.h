// Scheduler: continuous batching of generation requests over one Engine (sluice serve).
//
// One engine thread runs steps. Each step is one Engine::forward_batch over every active
// request: the next token of each decoding request plus, in the room left under n_batch, a
// prompt chunk of a request still in prefill. So prefill interleaves with the decode of the
// others, every matmul covers the whole batch, and in every MoE layer the union of the batch's
// experts is read once, each expert's matmul covering all tokens routed to it (Session's
// expert-major path). Request slots are the session's sequences (SessionOptions::n_seq): each
// has its own KV cache of n_ctx positions.
//
// Admission (pick_next): when a slot frees, the queued request whose prompt shares the longest
// token prefix with a running or recently finished request, or with a free slot's KV cache, goes
// first (the same tokens at the same positions route to the same experts, which are then still in
// the expert cache); ties go to the shorter prompt (a short prefill pulls fewer cold experts
// through the cache), then to the oldest. No request starves: one passed over max_skips times is
// taken before any other.
//
// Prefix reuse (llama-server's cache_prompt): a finished request leaves its tokens in its slot's
// KV cache (the prompt and the generated tokens that were fed). The admitted request goes to the
// free slot whose cache shares the longest usable prefix with its prompt (reusable_prefix; ties
// to the slot holding the fewest tokens, then the lowest index) and prefills only the rest: the
// sequence starts at that position, and the attention of a KV cache reads positions below the
// newest one only, so starting there is the truncation. A recurrent state (kimi-k3's KDA layers,
// Session::can_rewind() false) cannot be truncated: there a slot is reused only when the prompt
// continues everything it holds. The reused KV is the slot's own cache (inside --budget, nothing
// new allocated). Greedy answers equal those of a run without reuse (tested); the logits may
// differ in the last bits, since the reused prefix was computed in other chunks and the attention's
// padded width and form follow the chunk (docs/guarantees.md). A step that fails forgets every
// slot's cache.
//
// Threads: submit(), Generation::wait/cancel and metrics() are safe from any thread; the engine
// is used by the engine thread only. A cancelled request (client gone) leaves at the next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "app/generate.h"
#include "app/grammar/grammar_matcher.h"
#include "app/sampler.h"
#include "app/token_logprobs.h"
#include "core/llama/session.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

struct GenerationParams {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;  // 0: until end of generation or the context is full
  SamplerOptions sampling;
  bool stop_at_eog = true;  // end at the tokenizer's end-of-generation tokens (not delivered)
  bool cache_prompt = true;  // may reuse a slot's cached prefix (the request's "cache_prompt")
  // >= 0: each delivered token comes with its log-probability and the top N (<= kMaxTopLogprobs)
  // alternatives (app/token_logprobs.h); < 0: none are computed.
  int top_logprobs = -1;
  // A constraint on the reply (app/grammar/): null, or the grammar every sampled token must
  // follow. The scheduler builds the vocabulary's token texts once, at the first such request.
  std::shared_ptr<const Grammar> grammar;
};

enum class FinishReason { none, stop, length, cancelled, error };
const char* to_string(FinishReason r);

// One request's stream of tokens, shared by the engine thread (producer) and a client (consumer).
class Generation {
 public:
  // Waits up to `timeout` for tokens; moves the new ones to `out`. Returns true once the
  // request has finished and every token has been handed out.
  bool wait(std::vector<int32_t>& out, std::chrono::milliseconds timeout);
  // The same, also moving the new tokens' log-probabilities (one per token, when the request
  // asked for them with top_logprobs >= 0; else none) to `logprobs`.
  bool wait(std::vector<int32_t>& out, std::vector<TokenLogprob>& logprobs, std::chrono::milliseconds timeout);
  // Ends the request at the next step: cancel() when its client is gone (or the server cuts it
  // at shutdown), counted in requests_cancelled; end_early() when the client has all it wants
  // (a stop string appeared), counted as finished.
  void cancel() { cancelled_.store(true); }
  void end_early() {
    ended_early_.store(true);
    cancelled_.store(true);
  }
  bool cancelled() const { return cancelled_.load(); }
  FinishReason finish_reason() const;
  std::string error() const;
  int64_t prompt_tokens() const { return static_cast<int64_t>(params_.prompt.size()); }
  // Prompt tokens taken from the slot's KV cache instead of prefilled; set at admission, so final
  // once the first token (or the end) has arrived.
  int64_t cached_tokens() const { return cached_tokens_.load(); }

 private:
  friend class Scheduler;
  void deliver(int32_t token, const TokenLogprob* logprob = nullptr);
  void finish(FinishReason reason, std::string error = {});

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> pending_;
  std::vector<TokenLogprob> pending_logprobs_;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::none;
  std::string error_;
  std::atomic<bool> cancelled_{false}, ended_early_{false};
  std::atomic<int64_t> cached_tokens_{0};
  GenerationParams params_;
  int skipped_ = 0;  // times a younger request was admitted first
};

class ExpertParallel;  // app/expert_parallel.h

struct SchedulerOptions {
  int64_t max_queue = 16;  // waiting requests beyond the active ones; more -> submit() refuses
  int max_skips = 4;       // bound on how often admission may pass a request over
  // --expert-parallel on rank 0: each batch step is sent to the other ranks before it runs, and
  // they are released when the scheduler stops. Null: one process.
  ExpertParallel* parallel = nullptr;
  bool cache_prompt = true;  // false (--no-cache-prompt): every request prefills its whole prompt
};

struct SchedulerMetrics {
  uint64_t requests_finished = 0, requests_cancelled = 0, requests_rejected = 0;
  uint64_t queue_depth = 0, active = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  uint64_t prompt_tokens_cached = 0;  // of prompt_tokens, the ones reused from a slot's KV cache
  uint64_t steps = 0;
  // Steps that carried only decode tokens (no prefill): their tokens, time and disk reads,
  // and per MoE layer the routed (token, expert) pairs against the distinct experts read.
  uint64_t decode_steps = 0, decode_tokens = 0;
  double decode_seconds = 0;
  uint64_t decode_bytes_read = 0;
  uint64_t routed_pairs = 0, distinct_experts = 0;
  // The expert cache's counters (zero when in-core).
  uint64_t cache_hits = 0, cache_misses = 0, cache_bytes_read = 0;
};

// Admission choice among queued prompts (index into `queued`), given the prompts of running and
// recently finished requests; see the header comment. `skipped[i]` counts how often queued[i]
// was passed over. `queued` must not be empty.
size_t pick_next(std::span<const std::span<const int32_t>> queued, std::span<const int> skipped,
                 std::span<const std::span<const int32_t>> warm, int max_skips);

// Tokens of `prompt` that a slot whose KV cache holds `held` (positions 0, 1, ...) can keep: the
// shared prefix, at most prompt.size() - 1 (the last prompt token is computed for its logits); a
// state that cannot rewind keeps all of `held` or nothing.
size_t reusable_prefix(std::span<const int32_t> held, std::span<const int32_t> prompt, bool can_rewind);

class Scheduler final : public RoutingObserver {
 public:
  Scheduler(Engine& engine, Tokenizer tokenizer, const SchedulerOptions& options);
  ~Scheduler() override;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; null when the queue is full. Error(invalid_argument) for an empty
  // prompt or one that leaves no room to generate in the context.
  std::shared_ptr<Generation> submit(GenerationParams params);
  SchedulerMetrics metrics() const;
  int64_t n_ctx() const { return n_ctx_; }
  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }

  void on_routing(const RoutingEvent& event) override;

 private:
  // A request slot: the request and its sequence (prompt left, sampler, stop conditions,
  // position; app/generate.h), driven one batch step at a time.
  struct Slot {
    Slot(int64_t n_vocab, int64_t n_ctx) : seq(n_vocab, n_ctx) { held.reserve(static_cast<size_t>(n_ctx)); }
    std::shared_ptr<Generation> gen;
    SequenceGenerator seq;
    size_t fed = 0;             // tokens of this slot in the step being run
    std::vector<int32_t> held;  // the tokens its KV cache holds, at positions 0, 1, ... (n_ctx reserved)
    TokenLogprob logprob;  // the last sampled token's, when the request asked (sized once)
    GrammarMatcher grammar;  // the request's constraint, when it has one (buffers kept across requests)
  };
  void run();
  void admit_locked();
  void step();
  void finish(Slot& slot, FinishReason reason, std::string error = {});
  void count_step(bool prefill, uint64_t generated, double seconds, uint64_t bytes_before);

  Engine& engine_;
  Tokenizer tokenizer_;
  SchedulerOptions options_;
  int64_t n_ctx_ = 0, n_batch_ = 0, n_vocab_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Generation>> queue_;
  std::deque<std::vector<int32_t>> recent_;  // prompts of recently finished requests
  bool stop_ = false;
  SchedulerMetrics metrics_;

  // Engine thread only.
  std::vector<Slot> slots_;
  std::vector<int32_t> batch_tokens_, batch_seqs_, row_slot_;
  std::vector<int64_t> batch_pos_;
  std::vector<uint8_t> batch_want_;
  std::vector<std::pair<int32_t, FinishReason>> done_;  // per slot
  std::vector<uint32_t> expert_mark_;  // [n_layer][n_expert] step stamp, for distinct experts
  uint32_t stamp_ = 0;
  uint64_t step_pairs_ = 0, step_distinct_ = 0;
  int64_t n_expert_ = 0;

  std::shared_ptr<const GrammarVocab> grammar_vocab_;  // built at the first constrained request

  std::thread thread_;
};

}  // namespace sluice::core
