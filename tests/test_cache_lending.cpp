// ShardCache lending (shard_cache.h, "Lending"): designated slots at the arena's tail, taken out
// of use while a prompt batch's scratch needs their bytes, their pages back with the kernel, and
// given back for decode.
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
using sluice::test::run_step;
using sluice::test::TestReader;

namespace {

// 4 slots per size class (12 KiB and 20 KiB): 2 beyond each class's working set of 2.
constexpr uint64_t kBudget = 4 * 12288 + 4 * 20480;

ShardCacheOptions options(uint64_t lendable) {
  ShardCacheOptions o;
  o.budget_bytes = kBudget;
  o.policy = "lru";
  o.lendable_bytes = lendable;
  return o;
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

TEST_CASE("lent slots leave use and return their pages, the arena's registered head never changes, and reclaim gives them back") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  // 20,000 bytes: one slot of each class (in proportion to their spare slots), 32 KiB in all.
  ShardCache cache(fx.layout, reader, options(20000));
  const CachePlan& plan = cache.plan();
  REQUIRE(plan.classes.size() == 2);
  REQUIRE(plan.classes[0].n_slots == 4);
  REQUIRE(plan.classes[1].n_slots == 4);
  constexpr uint64_t kLent = 12288 + 20480;
  CHECK(cache.lendable_bytes() == kLent);
  // The designated slots sit at the arena's tail, outside the region the reader registered.
  const auto arena = cache.arena_span();
  const auto tail = arena.subspan(plan.arena_bytes - kLent);
  CHECK(reader.registered.data() == arena.data());
  CHECK(reader.registered.size() == plan.arena_bytes - kLent);
  CHECK(run_all(cache, fx));
  CHECK(cache.stats().resident_shards == 8);  // every slot holds a shard, the tail's too
  CHECK_FALSE(all_zero(tail));

  CHECK(cache.lend() == kLent);
  CHECK(cache.lend() == kLent);  // already lent: nothing changes
  CacheStats st = cache.stats();
  CHECK(st.lent_bytes == kLent);
  CHECK(st.resident_shards == 6);
  CHECK(st.layers[0].evictions + st.layers[1].evictions == 2);
  CHECK(cache.usable_slots(0) == 3);  // what a prompt batch may pin at once (streamed_experts.cpp)
  CHECK(cache.usable_slots(1) == 3);
  CHECK(all_zero(tail));  // MADV_DONTNEED: the pages went back, they read as zeros
  // Three slots per class now: the shards cycle through them, and the lent ones stay untouched.
  for (int round = 0; round < 3; ++round) {
    CHECK(run_all(cache, fx));
    CHECK(cache.stats().resident_bytes <= kBudget - kLent);
  }
  CHECK(all_zero(tail));

  cache.reclaim();
  CHECK(cache.stats().lent_bytes == 0);
  CHECK(cache.usable_slots(0) == 4);
  CHECK(reader.registered.size() == plan.arena_bytes - kLent);
  CHECK(run_all(cache, fx));
  const uint64_t hits = cache.stats().total.hits;
  CHECK(run_all(cache, fx));  // all four slots per class in use again: the second pass only hits
  CHECK(cache.stats().total.hits == hits + 8);
}

TEST_CASE("lendable bytes are capped at the slots beyond the working sets, and lending a pinned slot is an internal error") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache all(fx.layout, reader, options(1ull << 40));
  CHECK(all.lendable_bytes() == 2 * 12288 + 2 * 20480);
  CHECK(all.lend() == 2 * 12288 + 2 * 20480);
  CHECK(all.usable_slots(0) == 2);  // one layer's working set stays
  CHECK(run_all(all, fx));
  all.reclaim();

  TestReader reader2(fx.path.string());
  ShardCache none(fx.layout, reader2, options(0));
  CHECK(none.lendable_bytes() == 0);
  CHECK(none.lend() == 0);
  CHECK(reader2.registered.size() == none.plan().arena_bytes);

  // Every slot of class 0 pinned: the one lend would take is held.
  TestReader reader3(fx.path.string());
  ShardCache cache(fx.layout, reader3, options(1));
  std::vector<ShardCache::Pin> held;
  for (uint32_t e = 0; e < 4; ++e) held.push_back(cache.acquire({0, e}));
  for (auto& p : held) cache.wait(p);
  try {
    cache.lend();
    FAIL("lent a pinned slot");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::internal);
    CHECK(std::string(e.what()).find("is pinned") != std::string::npos);
  }
  CHECK(cache.stats().lent_bytes == 0);
}
