#include "app/serve_scheduler.h"

#include <algorithm>
#include <cstdio>

#include "app/expert_parallel.h"
#include "common/error.h"

namespace sluice::core {

namespace {
using Clock = std::chrono::steady_clock;
constexpr size_t kRecentPrompts = 8;  // finished prompts remembered as "warm" for admission
}  // namespace

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "none";
}

bool Generation::wait(std::vector<int32_t>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || finished_; });
  out.insert(out.end(), pending_.begin(), pending_.end());
  pending_.clear();
  pending_logprobs_.clear();
  return finished_;
}

bool Generation::wait(std::vector<int32_t>& out, std::vector<TokenLogprob>& logprobs, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || finished_; });
  out.insert(out.end(), pending_.begin(), pending_.end());
  logprobs.insert(logprobs.end(), pending_logprobs_.begin(), pending_logprobs_.end());
  pending_.clear();
  pending_logprobs_.clear();
  return finished_;
}

FinishReason Generation::finish_reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

std::string Generation::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

void Generation::deliver(int32_t token, const TokenLogprob* logprob) {
  {
    std::lock_guard lock(mu_);
    pending_.push_back(token);
    if (logprob) pending_logprobs_.push_back(*logprob);
  }
  cv_.notify_all();
}

void Generation::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard lock(mu_);
    finished_ = true;
    reason_ = reason;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

size_t pick_next(std::span<const std::span<const int32_t>> queued, std::span<const int> skipped,
                 std::span<const std::span<const int32_t>> warm, int max_skips) {
  for (size_t i = 0; i < queued.size(); ++i)  // bounded wait: the oldest starving request first
    if (skipped[i] >= max_skips) return i;
  size_t best = 0;
  size_t best_shared = 0;
  for (size_t i = 0; i < queued.size(); ++i) {
    size_t shared = 0;
    for (const auto& w : warm) {
      const size_t n = std::min(w.size(), queued[i].size());
      size_t k = 0;
      while (k < n && w[k] == queued[i][k]) ++k;
      shared = std::max(shared, k);
    }
    const bool better = i == 0 || shared > best_shared ||
                        (shared == best_shared && queued[i].size() < queued[best].size());
    if (better) {
      best = i;
      best_shared = shared;
    }
  }
  return best;
}

size_t reusable_prefix(std::span<const int32_t> held, std::span<const int32_t> prompt, bool can_rewind) {
  if (prompt.empty()) return 0;
  const size_t n = std::min(held.size(), prompt.size());
  size_t k = 0;
  while (k < n && held[k] == prompt[k]) ++k;
  k = std::min(k, prompt.size() - 1);  // the last prompt token is fed: its logits give the first token
  if (!can_rewind && k < held.size()) return 0;
  return k;
}

Scheduler::Scheduler(Engine& engine, Tokenizer tokenizer, const SchedulerOptions& options)
    : engine_(engine), tokenizer_(std::move(tokenizer)), options_(options) {
  Session& s = engine_.session();
  const ExpertGeometry c = engine_.model().expert_geometry();
  n_ctx_ = s.n_ctx();
  n_batch_ = s.n_batch();
  n_vocab_ = engine_.n_vocab();
  n_expert_ = c.n_expert;
  if (options_.max_queue < 0) throw Error(ErrorCode::invalid_argument, "queue size must be >= 0");
  slots_.reserve(static_cast<size_t>(s.n_seq()));
  for (int64_t i = 0; i < s.n_seq(); ++i) slots_.emplace_back(n_vocab_, n_ctx_);
  if (n_batch_ < s.n_seq())
    throw Error(ErrorCode::invalid_argument, "batch size " + std::to_string(n_batch_) + " is below the " +
                                                 std::to_string(s.n_seq()) + " parallel slots (raise -b)");
  batch_tokens_.resize(static_cast<size_t>(n_batch_));
  batch_seqs_.resize(static_cast<size_t>(n_batch_));
  batch_pos_.resize(static_cast<size_t>(n_batch_));
  batch_want_.resize(static_cast<size_t>(n_batch_));
  row_slot_.resize(static_cast<size_t>(n_batch_));
  done_.resize(slots_.size());
  expert_mark_.assign(static_cast<size_t>(c.n_layer * std::max<int64_t>(c.n_expert, 0)), 0);
  s.set_routing_observer(this);
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (options_.parallel) options_.parallel->end_steps();
  engine_.session().set_routing_observer(nullptr);
  for (auto& g : queue_) g->finish(FinishReason::cancelled, "the server is shutting down");
  for (Slot& s : slots_)
    if (s.gen) s.gen->finish(FinishReason::cancelled, "the server is shutting down");
}

std::shared_ptr<Generation> Scheduler::submit(GenerationParams params) {
  if (params.prompt.empty()) throw Error(ErrorCode::invalid_argument, "the prompt has no tokens");
  if (static_cast<int64_t>(params.prompt.size()) >= n_ctx_)
    throw Error(ErrorCode::invalid_argument, "the prompt has " + std::to_string(params.prompt.size()) +
                                                 " tokens; the context holds " + std::to_string(n_ctx_) +
                                                 " including at least one generated token");
  for (int32_t t : params.prompt)
    if (t < 0 || t >= n_vocab_)
      throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                                   std::to_string(n_vocab_) + ")");
  Sampler check(params.sampling, n_vocab_);  // validates the options before queueing
  if (params.top_logprobs > kMaxTopLogprobs)
    throw Error(ErrorCode::invalid_argument, "top_logprobs " + std::to_string(params.top_logprobs) + " is above " +
                                                 std::to_string(kMaxTopLogprobs));
  auto gen = std::make_shared<Generation>();
  gen->params_ = std::move(params);
  {
    std::lock_guard lock(mu_);
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue + static_cast<int64_t>(slots_.size()) - static_cast<int64_t>(metrics_.active)) {
      ++metrics_.requests_rejected;
      return nullptr;
    }
    queue_.push_back(gen);
    metrics_.queue_depth = queue_.size();
  }
  cv_.notify_all();
  return gen;
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

void Scheduler::on_routing(const RoutingEvent& e) {
  if (n_expert_ <= 0) return;
  step_pairs_ += e.experts.size();
  uint32_t* mark = expert_mark_.data() + static_cast<size_t>(e.layer) * static_cast<size_t>(n_expert_);
  for (int32_t x : e.experts) {
    if (x < 0 || x >= n_expert_) continue;
    if (mark[x] != stamp_) {
      mark[x] = stamp_;
      ++step_distinct_;
    }
  }
}

void Scheduler::finish(Slot& slot, FinishReason reason, std::string error) {
  {  // counted before the client is woken, so what it reads next includes this request
    std::lock_guard lock(mu_);
    if (reason == FinishReason::cancelled) ++metrics_.requests_cancelled;
    else ++metrics_.requests_finished;
    recent_.push_back(slot.gen->params_.prompt);
    if (recent_.size() > kRecentPrompts) recent_.pop_front();
    --metrics_.active;
  }
  slot.gen->finish(reason, std::move(error));
  slot.gen.reset();
  slot.fed = 0;
}

void Scheduler::admit_locked() {
  // Requests cancelled while queued leave without running.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancelled()) {
      const bool early = (*it)->ended_early_.load();
      (*it)->finish(early ? FinishReason::stop : FinishReason::cancelled);
      ++(early ? metrics_.requests_finished : metrics_.requests_cancelled);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  const bool can_rewind = engine_.session().can_rewind();
  while (!queue_.empty() && std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.gen; })) {
    std::vector<std::span<const int32_t>> queued, warm;
    std::vector<int> skipped;
    for (const auto& g : queue_) {
      queued.emplace_back(g->params_.prompt);
      skipped.push_back(g->skipped_);
    }
    for (const Slot& s : slots_) warm.emplace_back(s.gen ? std::span<const int32_t>(s.gen->params_.prompt) : std::span<const int32_t>(s.held));
    for (const auto& p : recent_) warm.emplace_back(p);
    const size_t pick = pick_next(queued, skipped, warm, options_.max_skips);
    for (size_t i = 0; i < pick; ++i) ++queue_[i]->skipped_;  // older ones passed over
    std::shared_ptr<Generation> gen = queue_[pick];
    queue_.erase(queue_.begin() + static_cast<int64_t>(pick));
    const GenerationParams& p = gen->params_;

    // The free slot whose KV cache holds the longest usable prefix; ties to the one holding the
    // fewest tokens (the least cache lost), then the lowest index.
    size_t best = slots_.size(), best_keep = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.gen) continue;
      const size_t keep = options_.cache_prompt && p.cache_prompt ? reusable_prefix(s.held, p.prompt, can_rewind) : 0;
      if (best == slots_.size() || keep > best_keep ||
          (keep == best_keep && s.held.size() < slots_[best].held.size())) {
        best = i;
        best_keep = keep;
      }
    }
    Slot& slot = slots_[best];
    slot.gen = std::move(gen);
    slot.held.resize(best_keep);  // positions from best_keep on are written again
    slot.gen->cached_tokens_.store(static_cast<int64_t>(best_keep));
    // End-of-generation tokens end a request undelivered; max_tokens and a full context end it
    // without feeding the last token (nothing would read its logits).
    if (p.grammar) {
      if (!grammar_vocab_) grammar_vocab_ = std::make_shared<const GrammarVocab>(tokenizer_);
      slot.grammar.reset(p.grammar, grammar_vocab_);
    }
    slot.seq.start(p.prompt, static_cast<int64_t>(best_keep),
                   {.max_tokens = p.max_tokens > 0 ? p.max_tokens : -1,
                    .end_tokens = p.stop_at_eog && tokenizer_.n_vocab() > 0 ? EndTokens::eog : EndTokens::none,
                    .tokenizer = &tokenizer_,
                    .feed_last_token = false,
                    .grammar = p.grammar ? &slot.grammar : nullptr},
                   p.sampling);
    ++metrics_.active;
    metrics_.prompt_tokens += p.prompt.size();
    metrics_.prompt_tokens_cached += best_keep;
  }
  metrics_.queue_depth = queue_.size();
}

void Scheduler::run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      admit_locked();
      const bool idle = std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.gen != nullptr; });
      if (idle) {
        if (stop_) return;
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        continue;
      }
      if (stop_) return;
    }
    try {
      step();
    } catch (const std::exception& e) {  // one failed step ends the requests in it, not the server
      // ... unless other ranks run the step too: they may wait in its exchange for this rank
      // forever, so the error ends the whole job (docs/scale-out.md).
      if (options_.parallel && options_.parallel->n_ranks() > 1) {
        std::fprintf(stderr, "sluice serve: error: %s\n", e.what());
        std::fflush(stderr);
        abort_expert_parallel(1);
      }
      for (Slot& s : slots_) {
        if (s.gen) finish(s, FinishReason::error, e.what());
        s.held.clear();  // what a failed pass left in the caches is unknown: no slot reuses it
      }
    }
  }
}

void Scheduler::step() {
  // Cancelled requests leave before the step.
  for (Slot& s : slots_)
    if (s.gen && s.gen->cancelled()) finish(s, s.gen->ended_early_.load() ? FinishReason::stop : FinishReason::cancelled);

  size_t n = 0, rows = 0;
  bool prefill = false;
  // Decode tokens first: one per request past its prompt.
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.gen || s.seq.prefilling()) continue;
    const SequenceInput in = s.seq.next_input(1);
    batch_tokens_[n] = in.tokens[0];
    batch_seqs_[n] = static_cast<int32_t>(i);
    batch_pos_[n] = in.pos;
    batch_want_[n] = 1;
    row_slot_[rows++] = static_cast<int32_t>(i);
    s.fed = 1;
    ++n;
  }
  // Then prompt chunks in the room left.
  for (size_t i = 0; i < slots_.size() && n < static_cast<size_t>(n_batch_); ++i) {
    Slot& s = slots_[i];
    if (!s.gen || !s.seq.prefilling()) continue;
    const SequenceInput in = s.seq.next_input(static_cast<size_t>(n_batch_) - n);
    for (size_t k = 0; k < in.tokens.size(); ++k) {
      batch_tokens_[n] = in.tokens[k];
      batch_seqs_[n] = static_cast<int32_t>(i);
      batch_pos_[n] = in.pos + static_cast<int64_t>(k);
      batch_want_[n] = in.wants_logits && k + 1 == in.tokens.size();
      if (batch_want_[n]) row_slot_[rows++] = static_cast<int32_t>(i);
      ++n;
    }
    s.fed = in.tokens.size();
    prefill = true;
  }
  if (n == 0) return;

  const uint64_t bytes_before = engine_.cache() ? engine_.cache()->stats().total.bytes_read : 0;
  ++stamp_;
  step_pairs_ = step_distinct_ = 0;
  const auto t0 = Clock::now();
  if (options_.parallel)
    options_.parallel->lead_step({batch_tokens_.data(), n}, {batch_seqs_.data(), n}, {batch_pos_.data(), n},
                                 {batch_want_.data(), n});
  const std::span<const float> logits =
      engine_.forward_batch({batch_tokens_.data(), n}, {batch_seqs_.data(), n}, {batch_pos_.data(), n},
                            {batch_want_.data(), n});
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  // Record what each slot's cache now holds, advance every slot in the batch, then sample the rows.
  for (size_t t = 0; t < n; ++t) {
    std::vector<int32_t>& held = slots_[static_cast<size_t>(batch_seqs_[t])].held;
    if (batch_pos_[t] != static_cast<int64_t>(held.size()))  // held.size() < n_ctx: no reallocation
      throw Error(ErrorCode::internal, "slot " + std::to_string(batch_seqs_[t]) + " fed position " +
                                           std::to_string(batch_pos_[t]) + " after " + std::to_string(held.size()) +
                                           " cached tokens");
    held.push_back(batch_tokens_[t]);
  }
  for (Slot& s : slots_) {
    if (s.fed) s.seq.fed(s.fed);
    s.fed = 0;
  }
  uint64_t generated = 0;
  size_t n_done = 0;  // requests that end with this step: finished after the counters below
  for (size_t r = 0; r < rows; ++r) {
    Slot& s = slots_[static_cast<size_t>(row_slot_[r])];
    const SampledToken t = s.seq.accept_logits(logits.subspan(r * static_cast<size_t>(n_vocab_), static_cast<size_t>(n_vocab_)));
    if (t.token >= 0) ++generated;
    if (t.token >= 0 && !t.end) {
      const int n_top = s.gen->params_.top_logprobs;
      if (n_top >= 0) token_logprob(logits.subspan(r * static_cast<size_t>(n_vocab_), static_cast<size_t>(n_vocab_)),
                                    t.token, n_top, s.logprob);
      s.gen->deliver(t.token, n_top >= 0 ? &s.logprob : nullptr);
    }
    if (s.seq.done())
      done_[n_done++] = {row_slot_[r], s.seq.reason() == StopReason::end_token ? FinishReason::stop : FinishReason::length};
  }
  count_step(prefill, generated, seconds, bytes_before);
  for (size_t k = 0; k < n_done; ++k) finish(slots_[static_cast<size_t>(done_[k].first)], done_[k].second);
}

void Scheduler::count_step(bool prefill, uint64_t generated, double seconds, uint64_t bytes_before) {
  std::lock_guard lock(mu_);
  ++metrics_.steps;
  metrics_.generated_tokens += generated;
  if (!prefill) {
    ++metrics_.decode_steps;
    metrics_.decode_tokens += generated;
    metrics_.decode_seconds += seconds;
    metrics_.routed_pairs += step_pairs_;
    metrics_.distinct_experts += step_distinct_;
  }
  if (engine_.cache()) {
    const cache::CacheCounters t = engine_.cache()->stats().total;
    if (!prefill) metrics_.decode_bytes_read += t.bytes_read - bytes_before;
    metrics_.cache_hits = t.hits;
    metrics_.cache_misses = t.misses;
    metrics_.cache_bytes_read = t.bytes_read;
  }
}

}  // namespace sluice::core
