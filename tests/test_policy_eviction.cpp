// Each eviction policy on small hand-made traces whose hit counts are worked out by hand.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cache/cache_simulator.h"
#include "cache/eviction_policy.h"
#include "cache/trace.h"
#include "common/error.h"

using namespace sluice::cache;
using sluice::Error;
using sluice::ErrorCode;

namespace {

// One sequence; `steps[t][l]` lists the experts of token t at layer l.
Trace make_trace(uint32_t n_layer, uint32_t n_expert, uint32_t topk,
                 const std::vector<std::vector<std::vector<uint32_t>>>& steps) {
  Trace t;
  t.header.model = "hand";
  t.header.n_layer = n_layer;
  t.header.n_expert = n_expert;
  t.header.topk = topk;
  t.sequences.emplace_back();
  for (const auto& tok : steps) {
    REQUIRE(tok.size() == n_layer);
    for (const auto& layer : tok) {
      REQUIRE(layer.size() == topk);
      for (uint32_t e : layer) t.sequences.back().experts.push_back(e);
    }
    ++t.sequences.back().n_token;
  }
  return t;
}

// Single layer, top-1: a plain reference string of experts.
Trace single_layer(uint32_t n_expert, const std::vector<uint32_t>& refs) {
  std::vector<std::vector<std::vector<uint32_t>>> steps;
  for (uint32_t e : refs) steps.push_back({{e}});
  return make_trace(1, n_expert, 1, steps);
}

uint64_t hits(const Trace& t, EvictionPolicy& p, uint64_t capacity) {
  return simulate_sequence(t, 0, p, capacity).hits;
}

uint64_t belady_hits(const Trace& t, uint64_t capacity) {
  auto future = access_sequence(t, 0);
  auto p = make_policy("belady", {.future = future});
  return hits(t, *p, capacity);
}

}  // namespace

TEST_CASE("lru evicts the least recently used shard") {
  // cap 2: 0m 1m 0h 2m(evicts 1) 0h 1m(evicts 2) -> 2 hits
  auto t = single_layer(3, {0, 1, 0, 2, 0, 1});
  auto p = make_lru_policy();
  CHECK(hits(t, *p, 2) == 2);
  // A cycle one longer than the cache: LRU never hits.
  auto cyc = single_layer(3, {0, 1, 2, 0, 1, 2, 0, 1, 2});
  CHECK(hits(cyc, *p, 2) == 0);
}

TEST_CASE("belady evicts the shard used farthest in the future") {
  // 0m 1m 2m(evict 1: 0 comes back sooner) 0h 1m(evict 0: never again) 2h -> 2 hits
  CHECK(belady_hits(single_layer(3, {0, 1, 2, 0, 1, 2}), 2) == 2);
  // Never-used-again shards go first: 0m 1m 2m(evict 1) 0h 0h -> 2 hits
  CHECK(belady_hits(single_layer(3, {0, 1, 2, 0, 0}), 2) == 2);
}

TEST_CASE("belady refuses an access sequence that differs from its future") {
  auto t = single_layer(3, {0, 1, 2});
  std::vector<ShardKey> wrong = {{0, 0}, {0, 2}, {0, 1}};
  auto p = make_policy("belady", {.future = wrong});
  try {
    simulate_sequence(t, 0, *p, 2);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::internal);
    CHECK(std::string(e.what()).find("future sequence says layer 0 expert 2") != std::string::npos);
  }
}

TEST_CASE("belady needs a future and names the simulator") {
  try {
    make_policy("belady", {});
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("simulator only") != std::string::npos);
  }
}

TEST_CASE("lfu keeps the frequently used shard that lru would drop") {
  // cap 2, trace 0 0 0 1 2 1 2:
  //   LRU: 0m 0h 0h 1m 2m(evict 0) 1h 2h -> 4 hits
  //   LFU: 0 has count 3; 1m 2m(evict 1) 1m(evict 2) 2m(evict 1) -> 2 hits
  auto t = single_layer(3, {0, 0, 0, 1, 2, 1, 2});
  auto lru = make_lru_policy();
  auto lfu = make_lfu_policy(1e6);
  CHECK(hits(t, *lru, 2) == 4);
  CHECK(hits(t, *lfu, 2) == 2);
}

TEST_CASE("lfu ages counts so old popularity fades") {
  // With a half-life of 0.25 tokens, 0's three early uses are worth almost nothing by token 4,
  // so it behaves like LRU at token grain: 4 hits.
  auto t = single_layer(3, {0, 0, 0, 1, 2, 1, 2});
  auto lfu = make_lfu_policy(0.25);
  CHECK(hits(t, *lfu, 2) == 4);
}

TEST_CASE("freq (lrfu) moves from lfu to lru as lambda grows") {
  auto t = single_layer(3, {0, 0, 0, 1, 2, 1, 2});
  auto low = make_freq_policy(0.1);  // frequency dominates: like LFU
  auto high = make_freq_policy(10);  // recency dominates: like LRU
  CHECK(hits(t, *low, 2) == 2);
  CHECK(hits(t, *high, 2) == 4);
}

TEST_CASE("lru-quota keeps each layer's share where lru thrashes across layers") {
  // 3 layers, each always uses expert 0; cap 2 (quotas 0, 1, 1). LRU cycles 3 keys through 2
  // slots and never hits. With quotas layer 2 keeps its shard: tokens 1..4 hit once each.
  std::vector<std::vector<std::vector<uint32_t>>> steps(5, {{0}, {0}, {0}});
  auto t = make_trace(3, 2, 1, steps);
  auto lru = make_lru_policy();
  auto quota = make_lru_quota_policy();
  CHECK(hits(t, *lru, 2) == 0);
  CHECK(hits(t, *quota, 2) == 4);
}

TEST_CASE("hot-pin never evicts the profile's hot shards while others can go") {
  // cap 2, hot fraction 0.5 -> expert 0 is pinned by the profile.
  // 0m 1m 2m(evict 1) 0h 1m(evict 2) 2m(evict 1) 0h -> 2 hits; LRU: 0 hits.
  auto t = single_layer(3, {0, 1, 2, 0, 1, 2, 0});
  ExpertProfile profile;
  profile.n_layer = 1;
  profile.n_expert = 3;
  profile.counts = {10, 1, 1};
  auto hot = make_hot_pin_policy(profile, 0.5);
  auto lru = make_lru_policy();
  CHECK(hits(t, *hot, 2) == 2);
  CHECK(hits(t, *lru, 2) == 0);
}

TEST_CASE("predict evicts the layer visited farthest ahead and matches belady on a layer cycle") {
  // 3 layers, each always expert 0, cap 2: predict keeps the shards whose layer comes next.
  // Per token after the first: 2, 1, 2, 1 hits -> 6, which is what Belady gets; LRU gets 0.
  std::vector<std::vector<std::vector<uint32_t>>> steps(5, {{0}, {0}, {0}});
  auto t = make_trace(3, 2, 1, steps);
  auto predict = make_predict_policy(nullptr, 0.0, 0, 0);
  CHECK(hits(t, *predict, 2) == 6);
  CHECK(belady_hits(t, 2) == 6);
}

TEST_CASE("predict keeps the shard that the token-to-token transitions name for the next token") {
  // One layer, 4 experts, top-2, room for 3. Token 1 loads {0, 1}, equal in recency and count;
  // token 2 brings 3. A profile says what follows 3 at the next token: the other one goes. With
  // the transitions off the tie goes to the least recently touched (0) either way.
  const PolicyGeometry g{1, 4, 2, 3};
  auto victim = [&](uint32_t follows_3, bool next_token) {
    ExpertProfile profile;
    profile.n_layer = 1;
    profile.n_expert = 4;
    profile.n_tokens = 100;
    profile.counts = {50, 50, 50, 50};
    profile.next_src = {0, 0, 0, 100};
    profile.next_transitions.assign(16, 0.0);
    profile.next_transitions[3 * 4 + follows_3] = 100;
    auto p = make_predict_policy(&profile, 0.5, 0, 8, next_token);
    p->reset(g);
    p->on_token();
    for (uint32_t e : {0u, 1u}) {
      p->on_insert({0, e});
      p->on_access({0, e}, false);
    }
    p->on_token();
    const std::vector<ShardKey> candidates{{0, 0}, {0, 1}};
    return candidates[p->choose_victim(candidates, {0, 3})].expert;
  };
  CHECK(victim(1, true) == 0);
  CHECK(victim(0, true) == 1);
  CHECK(victim(1, false) == 0);
  CHECK(victim(0, false) == 0);
}

TEST_CASE("simulator pins a step's hits so its misses cannot evict them") {
  // top-2, cap 2: token 0 loads {0,1}; token 1 uses {1,2}: 1 is pinned, so 2 must evict 0.
  // token 2 uses {1,0}: 1 hits, 0 misses.
  auto t = make_trace(1, 3, 2, {{{0, 1}}, {{1, 2}}, {{1, 0}}});
  for (const std::string name : {"lru", "lfu", "lru-quota", "freq", "predict"}) {
    auto p = make_policy(name, {});
    SimResult r = simulate_sequence(t, 0, *p, 2);
    CAPTURE(name);
    CHECK(r.hits == 2);
    CHECK(r.misses == 4);
  }
}

TEST_CASE("every policy keeps every accessed shard resident when used and never beats belady") {
  Trace t = make_trace(2, 4, 2, {{{0, 1}, {2, 3}}, {{1, 2}, {3, 0}}, {{0, 3}, {2, 1}}, {{0, 1}, {2, 3}},
                                 {{2, 1}, {0, 3}}, {{0, 1}, {1, 3}}});
  for (uint64_t cap : {2u, 3u, 4u, 6u}) {
    uint64_t bound = belady_hits(t, cap);
    for (const std::string name : {"lru", "lfu", "lru-quota", "freq", "predict"}) {
      auto p = make_policy(name, {});
      SimResult r = simulate_sequence(t, 0, *p, cap);
      CAPTURE(name);
      CAPTURE(cap);
      CHECK(r.hits + r.misses == 24);
      CHECK(r.hits <= bound);
    }
  }
}

TEST_CASE("a cache smaller than one step's experts is a budget error stating the minimum") {
  auto t = make_trace(1, 4, 2, {{{0, 1}}});
  auto p = make_lru_policy();
  try {
    simulate_sequence(t, 0, *p, 1);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::budget);
    CHECK(std::string(e.what()).find("minimum is 2 shards") != std::string::npos);
  }
}

TEST_CASE("unknown policy names are rejected with the list of known ones") {
  try {
    make_policy("fifo", {});
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("known: lru, lfu") != std::string::npos);
  }
}

TEST_CASE("lookahead is belady within a window of tokens and lru beyond it") {
  // One layer, top-1, cache of 2. Trace: 0 1 2 1 0 ... 0 1 2 | 1 0
  //   At token 2 (expert 2 misses, cache {0, 1}): expert 1 is next used at token 3, expert 0 at
  //   token 4. Belady evicts 0 (farthest) and hits 1 at token 3; lookahead with a 1-token window
  //   sees token 3 only: 0 is unseen, so it goes (same choice). Then token 4: 0 misses.
  auto t = single_layer(3, {0, 1, 2, 1, 0});
  auto future = access_sequence(t, 0);
  PolicyOptions one{.future = future};
  one.lookahead_tokens = 1;
  auto la = make_policy("lookahead", one);
  CHECK(la->name() == "lookahead");
  CHECK(hits(t, *la, 2) == 1);
  CHECK(belady_hits(t, 2) == 1);
  // Where the deciding reuse lies beyond the window, lookahead falls back to LRU and loses:
  //   0 1 2 2 2 0. At token 2, belady keeps 0 (used at token 5, 1 never again) and hits 0 later;
  //   with a 1-token window neither 0 nor 1 is visible, and LRU evicts 0.
  auto far = single_layer(3, {0, 1, 2, 2, 2, 0});
  auto far_future = access_sequence(far, 0);
  PolicyOptions narrow{.future = far_future};
  narrow.lookahead_tokens = 1;
  auto la1 = make_policy("lookahead", narrow);
  CHECK(hits(far, *la1, 2) == 2);  // tokens 3 and 4 hit 2; token 5 misses 0
  CHECK(belady_hits(far, 2) == 3);
  PolicyOptions wide{.future = far_future};
  wide.lookahead_tokens = 3;  // sees token 5 from token 2: belady's choice
  auto la3 = make_policy("lookahead", wide);
  CHECK(hits(far, *la3, 2) == 3);
  // A bound, like belady: it needs the future and a window of at least one token.
  CHECK(policy_is_clairvoyant("lookahead"));
  CHECK_THROWS_AS(make_policy("lookahead", {}), Error);
  PolicyOptions zero{.future = future};
  zero.lookahead_tokens = 0;
  CHECK_THROWS_AS(make_policy("lookahead", zero), Error);
}

TEST_CASE("on a layered trace lookahead never beats belady and equals it when the window covers the sequence") {
  Trace t = make_trace(2, 4, 2, {{{0, 1}, {2, 3}}, {{1, 2}, {3, 0}}, {{0, 3}, {2, 1}}, {{0, 1}, {2, 3}},
                                 {{2, 1}, {0, 3}}, {{0, 1}, {1, 3}}});
  auto future = access_sequence(t, 0);
  for (uint64_t cap : {3u, 4u, 6u}) {
    const uint64_t bound = belady_hits(t, cap);
    for (uint32_t w : {1u, 2u, 6u}) {
      PolicyOptions o{.future = future};
      o.lookahead_tokens = w;
      auto p = make_policy("lookahead", o);
      const uint64_t h = hits(t, *p, cap);
      CAPTURE(cap);
      CAPTURE(w);
      CHECK(h <= bound);
      if (w == 6) CHECK(h == bound);  // the window covers the whole sequence
    }
  }
}
