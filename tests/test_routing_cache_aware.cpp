// Cache-aware routing (core/experts/cache_aware_routing.h): the choice on scripted scores, the
// --route flag's values, and real sessions on the tiny deepseek2 and kimi-k3 models. With every
// expert in RAM (an in-core source) cache-aware routing gives exact routing's logits bit for
// bit; with a source that reports only the even experts as cached, every slot past the kept J
// holds an even expert and the logits move.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/experts/cache_aware_routing.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "core/kimi_k3/kimi_k3_session.h"
#include "core/llama/in_core_experts.h"
#include "core/llama/model.h"
#include "core/llama/session.h"
#include "kernels/thread_pool.h"
#include "tests/model_reference.h"

namespace {

using namespace sluice;
using core::RoutePolicy;

RoutePolicy cache_aware(int keep, int window) {
  RoutePolicy p;
  p.cache_aware = true;
  p.keep = keep;
  p.window = window;
  return p;
}

// Scores 15, 14, ..., 0 for experts 0..15: rank r is expert r.
std::vector<int32_t> pick(const RoutePolicy& p, const std::vector<uint8_t>& cached, size_t k = 4,
                          std::vector<float> sel = {}) {
  if (sel.empty())
    for (int e = 0; e < 16; ++e) sel.push_back(static_cast<float>(15 - e));
  std::vector<int32_t> ids(k), ranks(sel.size());
  core::select_experts(sel, ids, p, cached, ranks);
  return ids;
}

std::vector<uint8_t> cached_only(std::initializer_list<int> experts) {
  std::vector<uint8_t> c(16, 0);
  for (int e : experts) c[static_cast<size_t>(e)] = 1;
  return c;
}

std::string error_of(const std::string& text) {
  try {
    core::check_route_policy(core::parse_route_policy(text), 4);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Delegates to the in-core source but says only the even experts are in RAM.
class EvenCached final : public core::ExpertSource {
 public:
  explicit EvenCached(core::ExpertSource& inner) : inner_(inner) {}
  core::ExpertWeights acquire(int layer, int expert) override { return inner_.acquire(layer, expert); }
  void release(int layer, int expert) override { inner_.release(layer, expert); }
  void cached(int, std::span<uint8_t> out) const override {
    for (size_t e = 0; e < out.size(); ++e) out[e] = e % 2 == 0 ? 1 : 0;
  }

 private:
  core::ExpertSource& inner_;
};

// Every routing decision's experts, in selection order.
struct Routes final : core::RoutingObserver {
  std::vector<std::vector<int32_t>> events;
  void on_routing(const core::RoutingEvent& e) override { events.emplace_back(e.experts.begin(), e.experts.end()); }
};

std::vector<int32_t> some_tokens(int n, int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 7919 + 13) % n_vocab));
  return t;
}

// A prompt of 24 tokens in one batch, then 4 single steps: every logits row.
template <class Session>
std::vector<float> generate(Session& s, const std::vector<int32_t>& tokens) {
  std::vector<float> out;
  auto rows = s.forward({tokens.data(), 24}, 0);
  out.insert(out.end(), rows.begin(), rows.end());
  for (size_t i = 24; i < tokens.size(); ++i) {
    rows = s.forward({tokens.data() + i, 1}, static_cast<int64_t>(i));
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Exact, cache-aware over an in-core source, and cache-aware over EvenCached: logits and routes.
template <class Session, class Model, class InCore, class Options>
void check_sessions(const Model& model, Options opt, const RoutePolicy& policy, int keep, int64_t n_vocab) {
  const std::vector<int32_t> tokens = some_tokens(28, n_vocab);
  kernels::ThreadPool pool(2);
  InCore in_core(model);
  opt.n_ctx = 64;
  opt.n_batch = 32;
  Session exact(model, in_core, pool, opt);
  const std::vector<float> want = generate(exact, tokens);
  opt.route = policy;
  Session all_cached(model, in_core, pool, opt);
  CHECK(same_bytes(generate(all_cached, tokens), want));
  EvenCached even(in_core);
  Session some_cached(model, even, pool, opt);
  Routes routes;
  some_cached.set_routing_observer(&routes);
  CHECK(!same_bytes(generate(some_cached, tokens), want));
  REQUIRE(!routes.events.empty());
  size_t odd_past_keep = 0, slots_past_keep = 0;
  for (const auto& ids : routes.events)
    for (size_t j = static_cast<size_t>(keep); j < ids.size(); ++j) {
      ++slots_past_keep;
      odd_past_keep += ids[j] % 2 != 0;
    }
  CHECK(slots_past_keep > 0);
  CHECK(odd_past_keep == 0);
}

}  // namespace

TEST_CASE("cache-aware routing keeps the top J and fills the rest from cached experts of the top M, best first") {
  const RoutePolicy p = cache_aware(2, 8);
  CHECK(pick(p, std::vector<uint8_t>(16, 1)) == std::vector<int32_t>{0, 1, 2, 3});  // all cached: exact
  CHECK(pick(p, std::vector<uint8_t>(16, 0)) == std::vector<int32_t>{0, 1, 2, 3});  // none: exact
  CHECK(pick(p, cached_only({5, 7})) == std::vector<int32_t>{0, 1, 5, 7});
  CHECK(pick(p, cached_only({7, 5, 6})) == std::vector<int32_t>{0, 1, 5, 6});
  CHECK(pick(p, cached_only({6})) == std::vector<int32_t>{0, 1, 2, 6});       // too few: the true next fills
  CHECK(pick(p, cached_only({9, 12})) == std::vector<int32_t>{0, 1, 2, 3});   // outside the top M
  CHECK(pick(p, cached_only({0, 1})) == std::vector<int32_t>{0, 1, 2, 3});    // the kept ones cached
  // Exact routing, and J = k, ignore the cache.
  CHECK(pick(RoutePolicy{}, cached_only({5, 7})) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(pick(cache_aware(4, 8), cached_only({5, 7})) == std::vector<int32_t>{0, 1, 2, 3});
  // Default J = k / 2 and M = 2k.
  CHECK(pick(cache_aware(0, 0), cached_only({7, 8})) == std::vector<int32_t>{0, 1, 2, 7});
  // An expert outside the chosen groups (-inf) is never taken, cached or not.
  std::vector<float> sel;
  for (int e = 0; e < 16; ++e) sel.push_back(e == 4 ? -std::numeric_limits<float>::infinity() : static_cast<float>(15 - e));
  CHECK(pick(cache_aware(2, 16), cached_only({4, 9}), 4, sel) == std::vector<int32_t>{0, 1, 2, 9});
}

TEST_CASE("--route takes exact and cache-aware[=J[,M]] and refuses anything else with one line") {
  CHECK(core::parse_route_policy("exact").exact());
  const RoutePolicy d = core::parse_route_policy("cache-aware");
  CHECK(d.cache_aware);
  CHECK(d.keep_for(8) == 4);
  CHECK(d.window_for(8) == 16);
  const RoutePolicy j = core::parse_route_policy("cache-aware=3,12");
  CHECK(j.keep == 3);
  CHECK(j.window == 12);
  CHECK(core::parse_route_policy("cache-aware=1").keep == 1);
  CHECK(error_of("exact") == "");
  CHECK(error_of("cache-aware=4,4") == "");
  CHECK(error_of("cache").find("expected exact, cache-aware") != std::string::npos);
  CHECK(error_of("cache-aware3").find("expected exact, cache-aware") != std::string::npos);
  CHECK(error_of("cache-aware=0").find("positive whole numbers") != std::string::npos);
  CHECK(error_of("cache-aware=x").find("positive whole numbers") != std::string::npos);
  CHECK(error_of("cache-aware=2,").find("positive whole numbers") != std::string::npos);
  CHECK(error_of("cache-aware=5").find("J must be 1 to 4") != std::string::npos);
  CHECK(error_of("cache-aware=2,3").find("M must be at least 4") != std::string::npos);
}

TEST_CASE("deepseek2: cache-aware routing is exact with every expert in RAM and routes past J only to cached experts") {
  const core::Model model = core::Model::load((test::tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf").string());
  check_sessions<core::LlamaSession, core::Model, core::InCoreExpertSource>(model, core::SessionOptions{}, cache_aware(2, 16),
                                                                           2, model.config().n_vocab);
}

TEST_CASE("kimi-k3: cache-aware routing is exact with every expert in RAM and routes past J only to cached experts") {
  const auto model = core::KimiK3Model::load((test::reference_dir() / "kimi-k3" / "kimi-k3-q4_k_m.gguf").string());
  check_sessions<core::KimiK3Session, core::KimiK3Model, core::KimiK3InCoreExperts>(
      *model, core::KimiK3SessionOptions{}, cache_aware(1, 8), 1, model->config().n_vocab);
}
