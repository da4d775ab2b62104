// The serve scheduler: cache-aware admission with bounded wait, and continuous batching over a
// real Engine giving each request what it gets alone.
#include <doctest/doctest.h>

#include <future>

#include "core/engine.h"
#include "app/serve_scheduler.h"
#include "core/text/tokenizer.h"
#include "tests/model_reference.h"
#include "tests/scheduler_support.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using Prompt = std::vector<int32_t>;

size_t pick(const std::vector<Prompt>& queued, const std::vector<int>& skipped, const std::vector<Prompt>& warm,
            int max_skips = 4) {
  std::vector<std::span<const int32_t>> q(queued.begin(), queued.end()), w(warm.begin(), warm.end());
  return core::pick_next(q, skipped, w, max_skips);
}


}  // namespace

TEST_CASE("admission prefers the queued prompt that shares the longest prefix with warm requests") {
  const std::vector<Prompt> queued{{1, 2, 3}, {7, 8, 9, 10}, {7, 8}};
  CHECK(pick(queued, {0, 0, 0}, {{7, 8, 9, 11}}) == 1);   // shares 3 tokens
  CHECK(pick(queued, {0, 0, 0}, {}) == 2);                // nothing warm: the shortest prompt
  CHECK(pick({{5, 5}, {6, 6}}, {0, 0}, {}) == 0);         // equal: the oldest
}

TEST_CASE("admission never passes a request over more than max_skips times") {
  const std::vector<Prompt> queued{{1, 2, 3, 4, 5}, {7, 8}};
  CHECK(pick(queued, {3, 0}, {{7, 8}}, 4) == 1);
  CHECK(pick(queued, {4, 0}, {{7, 8}}, 4) == 0);  // starving: taken first whatever is warm
}

TEST_CASE("batched requests through the scheduler give each the tokens it gets alone") {
  const std::string path = (tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf").string();
  const Manifest m = load_manifest("deepseek2", "q4_k_m");
  const std::vector<Prompt> prompts{m.prompt, {m.prompt.begin() + 2, m.prompt.end()}, {m.prompt.begin(), m.prompt.begin() + 3}};
  auto make = [&](int64_t n_seq) {
    core::EngineOptions o;
    o.model_path = path;
    o.session.n_ctx = 64;
    o.session.n_batch = 32;
    o.session.n_seq = n_seq;
    o.cache_experts = 0.5;  // streamed through a cache that must evict
    return std::make_unique<core::Engine>(o);
  };
  std::vector<std::vector<int32_t>> alone;
  {
    auto e = make(1);
    core::Scheduler s(*e, core::Tokenizer::from_gguf(e->model().gguf()), {});
    for (const auto& p : prompts) alone.push_back(generate(s, p, 6));
  }
  auto e = make(3);
  core::Scheduler s(*e, core::Tokenizer::from_gguf(e->model().gguf()), {});
  std::vector<std::future<std::vector<int32_t>>> together;
  for (const auto& p : prompts)
    together.push_back(std::async(std::launch::async, [&s, p] { return generate(s, p, 6); }));
  for (size_t i = 0; i < prompts.size(); ++i) CHECK(together[i].get() == alone[i]);
  const core::SchedulerMetrics mt = s.metrics();
  CHECK(mt.requests_finished == 3);
  CHECK(mt.generated_tokens == 18);
  CHECK(mt.active == 0);
}

TEST_CASE("the scheduler refuses past its queue and rejects prompts that fill the context") {
  const std::string path = (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string();
  core::EngineOptions o;
  o.model_path = path;
  o.in_core = true;
  o.session.n_ctx = 512;
  o.session.n_batch = 16;
  core::Engine e(o);
  core::Scheduler s(e, core::Tokenizer::from_gguf(e.model().gguf()), {.max_queue = 0});
  core::GenerationParams p;
  p.prompt = Prompt(512, 1);
  CHECK_THROWS_WITH_AS(s.submit(p), doctest::Contains("the context holds 512"), Error);
  p.prompt = {1, 2};
  p.max_tokens = 0;  // until the context is full: long enough to hold the slot
  auto first = s.submit(p);
  REQUIRE(first);
  std::vector<std::shared_ptr<core::Generation>> more;
  for (int i = 0; i < 4; ++i) more.push_back(s.submit(p));
  CHECK(std::count(more.begin(), more.end(), nullptr) >= 3);  // one slot, no queue
  first->cancel();
}
