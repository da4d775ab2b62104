// KV prefix reuse in the serve scheduler (app/serve_scheduler.h): a request whose prompt starts
// with tokens a free slot's KV cache holds prefills only the rest, in the slot holding the longest
// usable prefix, and answers as it does without reuse. Conversations here resend their whole
// history (the earlier prompts) plus new tokens each turn; the slot then also holds the previous
// answer's tokens, which the new prompt does not continue, so the cache is cut back to the shared
// prefix. kimi-k3's recurrent state cannot be cut back: it reuses only an exact continuation.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "app/serve_scheduler.h"
#include "core/engine.h"
#include "core/text/tokenizer.h"
#include "tests/model_reference.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using Prompt = std::vector<int32_t>;

struct Answer {
  std::vector<int32_t> tokens;
  int64_t cached = -1;
};

// n greedy tokens (EOG ignored) for `prompt`; `reuse` is the request's cache_prompt.
Answer ask(core::Scheduler& s, const Prompt& prompt, int n, bool reuse = true) {
  core::GenerationParams p;
  p.prompt = prompt;
  p.max_tokens = n;
  p.sampling.temperature = 0;
  p.stop_at_eog = false;
  p.cache_prompt = reuse;
  auto g = s.submit(std::move(p));
  REQUIRE(g);
  Answer a;
  while (!g->wait(a.tokens, std::chrono::milliseconds(1000))) {
  }
  CHECK(g->finish_reason() == core::FinishReason::length);
  a.cached = g->cached_tokens();
  return a;
}

// Turn k's new tokens: `n` ids drawn from the vocabulary with a fixed stride.
Prompt new_tokens(int k, int n, int64_t n_vocab) {
  Prompt out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<int32_t>((97 + 131 * k + 17 * i) % n_vocab));
  return out;
}

std::unique_ptr<core::Engine> engine(const std::string& path, int64_t n_seq) {
  core::EngineOptions o;
  o.model_path = path;
  o.session.n_ctx = 256;
  o.session.n_batch = 32;  // the longer prompts prefill in chunks
  o.session.n_seq = n_seq;
  o.cache_experts = 0.5;  // streamed through a cache that must evict
  return std::make_unique<core::Engine>(o);
}

}  // namespace

TEST_CASE("the reusable prefix is the shared one, keeps the last prompt token to compute, and never rewinds a recurrent state") {
  const Prompt held{1, 2, 3, 4, 5};
  CHECK(core::reusable_prefix(held, Prompt{1, 2, 3, 9, 9}, true) == 3);
  CHECK(core::reusable_prefix(held, Prompt{1, 2, 3, 4, 5, 6}, true) == 5);
  CHECK(core::reusable_prefix(held, Prompt{1, 2, 3, 4, 5}, true) == 4);  // the same prompt: its last token again
  CHECK(core::reusable_prefix(held, Prompt{1, 2}, true) == 1);
  CHECK(core::reusable_prefix(held, Prompt{7, 2, 3}, true) == 0);
  CHECK(core::reusable_prefix({}, Prompt{1, 2}, true) == 0);
  // A recurrent state: all it holds, continued, or nothing.
  CHECK(core::reusable_prefix(held, Prompt{1, 2, 3, 4, 5, 6}, false) == 5);
  CHECK(core::reusable_prefix(held, Prompt{1, 2, 3, 4, 5}, false) == 0);
  CHECK(core::reusable_prefix(held, Prompt{1, 2, 3, 9, 9}, false) == 0);
}

TEST_CASE("two interleaved conversations each reuse their own slot and answer as without reuse") {
  const std::string path = (tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf").string();
  const Manifest m = load_manifest("deepseek2", "q4_k_m");
  constexpr int kTurns = 4, kNew = 6, kGen = 3;
  // Conversation c's turn k: its turn k - 1 prompt plus new tokens (the answers are not resent).
  std::vector<Prompt> turns[2];
  for (int c = 0; c < 2; ++c) {
    Prompt p = c == 0 ? m.prompt : Prompt(m.prompt.rbegin(), m.prompt.rend());
    for (int k = 0; k < kTurns; ++k) {
      if (k > 0) {
        const Prompt add = new_tokens(10 * c + k, kNew, m.n_vocab);
        p.insert(p.end(), add.begin(), add.end());
      }
      turns[c].push_back(p);
    }
  }
  std::vector<Answer> with, without;
  auto run = [&](bool reuse, std::vector<Answer>& out) {
    auto e = engine(path, 2);
    core::Scheduler s(*e, core::Tokenizer::from_gguf(e->model().gguf()), {.cache_prompt = reuse});
    for (int k = 0; k < kTurns; ++k)
      for (int c = 0; c < 2; ++c) out.push_back(ask(s, turns[c][static_cast<size_t>(k)], kGen));
    const core::SchedulerMetrics mt = s.metrics();
    uint64_t cached = 0;
    for (const Answer& a : out) cached += static_cast<uint64_t>(a.cached);
    CHECK(mt.prompt_tokens_cached == cached);
  };
  run(true, with);
  run(false, without);
  for (size_t i = 0; i < with.size(); ++i) {
    const int k = static_cast<int>(i / 2), c = static_cast<int>(i % 2);
    CAPTURE(k);
    CAPTURE(c);
    CHECK(with[i].tokens == without[i].tokens);
    CHECK(without[i].cached == 0);
    if (k == 0) {
      CHECK(with[i].cached == 0);
    } else {
      // At least the previous prompt (its slot kept it; a first new token equal to the previous
      // answer's first token would be shared too), never the whole prompt.
      const int64_t previous = static_cast<int64_t>(turns[c][static_cast<size_t>(k - 1)].size());
      CHECK(with[i].cached >= previous);
      CHECK(with[i].cached <= previous + 1);
    }
  }
}

TEST_CASE("a request that asks for no prompt cache prefills its whole prompt and gets the same answer") {
  const std::string path = (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string();
  const Manifest m = load_manifest("qwen3moe", "q4_k_m");
  auto e = engine(path, 1);
  core::Scheduler s(*e, core::Tokenizer::from_gguf(e->model().gguf()), {});
  Prompt longer = m.prompt;
  const Prompt add = new_tokens(1, 5, m.n_vocab);
  longer.insert(longer.end(), add.begin(), add.end());
  CHECK(ask(s, m.prompt, 4).cached == 0);
  const Answer cold = ask(s, longer, 4, false);
  CHECK(cold.cached == 0);
  const Answer warm = ask(s, longer, 4);
  CHECK(warm.cached == static_cast<int64_t>(longer.size()) - 1);  // all of it held: the last token again
  CHECK(warm.tokens == cold.tokens);
}

TEST_CASE("kimi-k3 reuses a slot only where the prompt continues all its recurrent state holds") {
  const std::string path = (reference_dir() / "kimi-k3" / "kimi-k3-q4_k_m.gguf").string();
  std::vector<Answer> with, without;
  Prompt first = new_tokens(0, 9, 2048), second = first, third;
  const Prompt add = new_tokens(1, 7, 2048);
  second.insert(second.end(), add.begin(), add.end());
  third = second;
  third.insert(third.end(), add.begin(), add.end());
  auto run = [&](bool reuse, std::vector<Answer>& out) {
    auto e = engine(path, 1);
    REQUIRE_FALSE(e->session().can_rewind());
    core::Scheduler s(*e, core::Tokenizer::from_gguf(e->model().gguf()), {.cache_prompt = reuse});
    out.push_back(ask(s, first, 1));   // one token, not fed: the state ends at the prompt's end
    out.push_back(ask(s, second, 3));  // continues it; two answer tokens fed after it
    out.push_back(ask(s, third, 2));   // does not continue those: starts over
  };
  run(true, with);
  run(false, without);
  for (size_t i = 0; i < with.size(); ++i) {
    CAPTURE(i);
    CHECK(with[i].tokens == without[i].tokens);
    CHECK(without[i].cached == 0);
  }
  CHECK(with[0].cached == 0);
  CHECK(with[1].cached == static_cast<int64_t>(first.size()));
  CHECK(with[2].cached == 0);
}
