// ShardCache lending (shard_cache.h, "Lending"): slots taken out of use while a prompt batch's
// scratch needs their bytes, their pages back with the kernel, and given back for decode.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cache/shard_cache.h"
#include "common/error.h"
#include "tests/cache_test_util.h"

using namespace sluice::cache;
using sluice::Error;
using sluice::ErrorCode;
using sluice::test::CacheFixture;
using sluice::test::TestReader;

namespace {

// 4 slots per size class (12 KiB and 20 KiB): 2 beyond each class's working set of 2.
constexpr uint64_t kBudget = 4 * 12288 + 4 * 20480;

ShardCacheOptions options() {
  ShardCacheOptions o;
  o.budget_bytes = kBudget;
  o.policy = "lru";
  return o;
}

bool run_step(ShardCache& cache, const CacheFixture& fx, const std::vector<ShardKey>& keys) {
  auto pins = cache.acquire_all(keys);
  bool ok = true;
  for (size_t n = 0; n < pins.size(); ++n) {
    size_t i = cache.wait_any(pins);
    ok = ok && fx.pin_matches(pins[i]);
    pins[i].release();
  }
  return ok;
}

// Every expert of both layers, two at a time; false when any byte is wrong.
bool run_all(ShardCache& cache, const CacheFixture& fx) {
  bool ok = true;
  for (uint32_t l = 0; l < 2; ++l) ok = run_step(cache, fx, {{l, 0}, {l, 1}}) && run_step(cache, fx, {{l, 2}, {l, 3}}) && ok;
  return ok;
}

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

TEST_CASE("lent slots leave use and return their pages, and reclaim gives them back with the arena registered again") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, options());
  const CachePlan& plan = cache.plan();
  REQUIRE(plan.classes.size() == 2);
  REQUIRE(plan.classes[0].n_slots == 4);
  REQUIRE(plan.classes[1].n_slots == 4);
  CHECK(cache.lendable_bytes() == 2 * 12288 + 2 * 20480);
  CHECK(run_all(cache, fx));
  CHECK(cache.stats().resident_shards == 8);  // every slot holds a shard: none of its pages is zero
  const auto arena = cache.arena_span();
  const auto top_slot = [&](uint32_t c) {
    const SizeClass& sc = plan.classes[c];
    return arena.subspan(sc.arena_offset + (sc.n_slots - 1) * sc.slot_bytes, sc.slot_bytes);
  };
  CHECK_FALSE(all_zero(top_slot(0)));
  CHECK_FALSE(all_zero(top_slot(1)));

  // 20,000 bytes: one slot of each class (in proportion to their spare slots), 32 KiB in all.
  CHECK(cache.lend(20000) == 12288 + 20480);
  CHECK(cache.lend(10000) == 12288 + 20480);  // already lent: nothing changes
  CacheStats st = cache.stats();
  CHECK(st.lent_bytes == 12288 + 20480);
  CHECK(st.resident_shards == 6);
  CHECK(cache.usable_slots(0) == 3);  // what a prompt batch may pin at once (streamed_experts.cpp)
  CHECK(cache.usable_slots(1) == 3);
  CHECK(st.layers[0].evictions + st.layers[1].evictions == 2);
  CHECK(reader.registered.empty());  // a registered page would stay pinned: nothing returned
  CHECK(all_zero(top_slot(0)));      // MADV_DONTNEED: the pages went back, they read as zeros
  CHECK(all_zero(top_slot(1)));
  // Three slots per class now: the shards cycle through them, and the lent ones stay untouched.
  for (int round = 0; round < 3; ++round) {
    CHECK(run_all(cache, fx));
    CHECK(cache.stats().resident_bytes <= kBudget - (12288 + 20480));
  }
  CHECK(all_zero(top_slot(0)));
  CHECK(all_zero(top_slot(1)));

  cache.reclaim();
  CHECK(cache.stats().lent_bytes == 0);
  CHECK(cache.usable_slots(0) == 4);
  CHECK(reader.registered.size() == plan.arena_bytes);
  CHECK(run_all(cache, fx));
  const uint64_t hits = cache.stats().total.hits;
  CHECK(run_all(cache, fx));  // all four slots per class in use again: the second pass only hits
  CHECK(cache.stats().total.hits == hits + 8);
}

TEST_CASE("lending more than the slots beyond the working sets, or a pinned slot, is an internal error") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, options());
  try {
    cache.lend(2 * 12288 + 2 * 20480 + 1);
    FAIL("lent more than the spare slots");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::internal);
    CHECK(std::string(e.what()).find("cannot lend") == 0);
  }
  CHECK(cache.stats().lent_bytes == 0);
  // Every slot of class 0 pinned: the one lend would take is held.
  std::vector<ShardCache::Pin> held;
  for (uint32_t e = 0; e < 4; ++e) held.push_back(cache.acquire({0, e}));
  for (auto& p : held) cache.wait(p);
  try {
    cache.lend(1);
    FAIL("lent a pinned slot");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::internal);
    CHECK(std::string(e.what()).find("is pinned") != std::string::npos);
  }
}
