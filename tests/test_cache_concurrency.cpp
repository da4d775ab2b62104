// ShardCache under threads, and the invariant that the real cache and the trace simulator make
// the same decisions with the same policy.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "cache/cache_simulator.h"
#include "cache/shard_cache.h"
#include "common/error.h"
#include "io/pread_reader.h"
#include "tests/cache_test_util.h"

using namespace sluice::cache;
using sluice::test::CacheFixture;
using sluice::test::random_trace;
using sluice::test::TestReader;

namespace {


}  // namespace

TEST_CASE("the shard cache makes the same hits as the simulator for every policy") {
  const uint32_t L = 4, E = 8, K = 2;
  CacheFixture fx(L, E, /*two_classes=*/false);
  Trace trace = random_trace(L, E, K, 60, 7);
  for (const std::string policy : {"lru", "lfu", "lru-quota", "freq", "predict"}) {
    for (uint64_t cap : {2u, 5u, 9u, 16u}) {
      auto p = make_policy(policy, {});
      SimResult sim = simulate_sequence(trace, 0, *p, cap);
      TestReader reader(fx.path.string());
      ShardCacheOptions o;
      o.budget_bytes = cap * slot_bytes(fx.layout, 0);
      o.policy = policy;
      ShardCache cache(fx.layout, reader, o);
      REQUIRE(cache.plan().total_slots() == cap);
      bool bytes_ok = true;
      for (uint32_t t = 0; t < trace.sequences[0].n_token; ++t) {
        cache.begin_token();
        for (uint32_t l = 0; l < L; ++l) {
          std::vector<ShardKey> keys;
          for (uint32_t e : trace.step(0, t, l)) keys.push_back({l, e});
          auto pins = cache.acquire_all(keys);
          for (size_t n = 0; n < pins.size(); ++n) {
            size_t i = cache.wait_any(pins);
            bytes_ok = bytes_ok && fx.pin_matches(pins[i]);
            pins[i].release();
          }
        }
      }
      CacheStats st = cache.stats();
      CAPTURE(policy);
      CAPTURE(cap);
      CHECK(bytes_ok);
      CHECK(st.total.hits == sim.hits);
      CHECK(st.total.misses == sim.misses);
      CHECK(st.total.evictions == sim.evictions);
      for (uint32_t l = 0; l < L; ++l) CHECK(st.layers[l].hits == sim.layers[l].hits);
    }
  }
}

TEST_CASE("threads acquiring, waiting on and releasing shards concurrently always see the right bytes") {
  const uint32_t L = 4, E = 16;
  CacheFixture fx(L, E, /*two_classes=*/true);
  sluice::io::PreadReader reader(fx.path.string(), {.workers = 4});
  ShardCacheOptions o;
  o.budget_bytes = 12 * (12288 + 20480);
  o.policy = "predict";
  ShardCache cache(fx.layout, reader, o);
  std::atomic<int> bad{0};
  std::atomic<int> budget_errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(100 + w);
      for (int it = 0; it < 300; ++it) {
        uint32_t l = rng() % L;
        uint32_t a = rng() % E, b = (a + 1 + rng() % (E - 1)) % E;
        try {
          auto pins = cache.acquire_all(std::vector<ShardKey>{{l, a}, {l, b}});
          for (int n = 0; n < 2; ++n) {
            size_t i = cache.wait_any(pins);
            if (!fx.pin_matches(pins[i])) ++bad;
            pins[i].release();
          }
        } catch (const sluice::Error&) {
          ++budget_errors;
        }
        if (w == 0) cache.prefetch({static_cast<uint32_t>(rng() % L), static_cast<uint32_t>(rng() % E)});
      }
    });
  }
  // Several threads waiting on one shard at once.
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&] {
      for (int it = 0; it < 100; ++it) {
        auto pin = cache.acquire({1, static_cast<uint32_t>(it % E)});
        cache.wait(pin);
        if (!fx.pin_matches(pin)) ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
  CHECK(budget_errors == 0);
  CacheStats st = cache.stats();
  CHECK(st.pinned_shards == 0);
  CHECK(st.resident_bytes <= o.budget_bytes);
  CHECK(st.total.hits + st.total.misses == 4 * 300 * 2 + 300);
  CHECK(st.total.evictions > 0);
}
