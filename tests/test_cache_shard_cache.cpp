// ShardCache: budget, slabs, pins, landing bytes, failures, statistics.
#include <doctest/doctest.h>

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

ShardCacheOptions with_budget(uint64_t budget, std::string policy = "lru") {
  ShardCacheOptions o;
  o.budget_bytes = budget;
  o.policy = std::move(policy);
  return o;
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return std::string(sluice::to_string(e.code())) + ": " + e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("cache plan carves one exact slab per size class within the budget") {
  CacheFixture fx;
  CHECK(slot_bytes(fx.layout, 0) == 3 * 4096);
  CHECK(slot_bytes(fx.layout, 1) == 5 * 4096);
  CachePlan plan = plan_cache(fx.layout, 110592);
  REQUIRE(plan.classes.size() == 2);
  CHECK(plan.min_bytes == 2 * 12288 + 2 * 20480);
  CHECK(plan.classes[0].slot_bytes == 12288);
  CHECK(plan.classes[0].n_slots == 4);
  CHECK(plan.classes[1].slot_bytes == 20480);
  CHECK(plan.classes[1].n_slots == 3);
  CHECK(plan.classes[1].arena_offset == 4 * 12288);
  CHECK(plan.arena_bytes == 110592);
  CHECK(plan.class_of_layer == std::vector<uint32_t>{0, 1});
  // Never more slots than shards, whatever the budget.
  CachePlan huge = plan_cache(fx.layout, 1ull << 30);
  CHECK(huge.classes[0].n_slots == 4);
  CHECK(huge.classes[1].n_slots == 4);
  CHECK(huge.arena_bytes == 4 * 12288 + 4 * 20480);
}

TEST_CASE("a budget below one layer's working set is a budget error stating the minimum") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  std::string err = error_of([&] { ShardCache cache(fx.layout, reader, with_budget(65535)); });
  CHECK(err.find("budget: ") == 0);
  CHECK(err.find("the minimum is 64.0 KiB (65536 bytes)") != std::string::npos);
  CHECK(err.find("2 x 12.0 KiB + 2 x 20.0 KiB") != std::string::npos);
}

TEST_CASE("shard cache lands the right bytes for shards of both size classes") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, with_budget(1 << 20));
  CHECK(run_step(cache, fx, {{0, 1}, {0, 3}}));
  CHECK(run_step(cache, fx, {{1, 0}, {1, 2}}));
  CHECK(run_step(cache, fx, {{0, 3}, {0, 2}}));  // one hit, one miss
  auto pin = cache.acquire({1, 2});
  cache.wait(pin);
  CHECK(fx.pin_matches(pin));
  CHECK(pin.bytes().size() == 20480);
  CHECK(reinterpret_cast<uintptr_t>(pin.bytes().data()) % 4096 == 0);
  CHECK(reinterpret_cast<uintptr_t>(pin.tensor(1).data()) % 4096 == 0);
}

TEST_CASE("expert cache never exceeds its budget when every shard is pinned") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  const uint64_t budget = 65536;  // exactly 2 slots per size class
  ShardCache cache(fx.layout, reader, with_budget(budget));
  auto a = cache.acquire({0, 0});
  auto b = cache.acquire({0, 1});
  std::string err = error_of([&] { cache.acquire({0, 2}); });
  CHECK(err.find("budget: cannot load layer 0 expert 2: all 2 cache slots of 12.0 KiB") == 0);
  CHECK(err.find("are pinned") != std::string::npos);
  CacheStats st = cache.stats();
  CHECK(st.arena_bytes <= budget);
  CHECK(st.resident_bytes == 2 * 12288);
  CHECK(st.pinned_shards == 2);
  // The other size class is unaffected.
  auto c = cache.acquire({1, 3});
  cache.wait(c);
  CHECK(fx.pin_matches(c));
  // Releasing a pin makes room: the released shard is the victim.
  cache.wait(a);
  a.release();
  auto d = cache.acquire({0, 2});
  cache.wait(d);
  CHECK(fx.pin_matches(d));
  CHECK_FALSE(cache.is_resident({0, 0}));
  CHECK(cache.stats().resident_bytes == 2 * 12288 + 20480);
  CHECK(cache.stats().resident_bytes <= budget);
}

TEST_CASE("pinned shards are never evicted while other shards cycle through the cache") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, with_budget(65536));
  auto held = cache.acquire({0, 0});
  cache.wait(held);
  for (int round = 0; round < 5; ++round) {
    for (uint32_t e = 1; e < 4; ++e) CHECK(run_step(cache, fx, {{0, e}}));
  }
  CHECK(cache.is_resident({0, 0}));
  CHECK(fx.pin_matches(held));
  CHECK(cache.stats().layers[0].evictions == 14);
}

TEST_CASE("a failed read is an io_error naming the shard, tensor and offset, and is retried later") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, with_budget(1 << 20));
  const TensorSlice& up = fx.layout.layers[1].tensors[1];
  const uint64_t offset = up.file_offset + 2 * up.expert_stride;
  reader.fail_offset = offset + 10;
  {
    auto pins = cache.acquire_all(std::vector<ShardKey>{{1, 1}, {1, 2}});
    std::string err = error_of([&] {
      for (int i = 0; i < 2; ++i) pins[cache.wait_any(pins)].release();
    });
    CHECK(err.find("io_error: layer 1 expert 2, tensor 'blk.1.ffn_up_exps.weight' (slice at offset " +
                   std::to_string(offset)) == 0);
    CHECK(err.find("Input/output error") != std::string::npos);
    std::string err2 = error_of([&] { cache.wait(pins[1]); });
    CHECK(err2 == err);
  }
  CHECK_FALSE(cache.is_resident({1, 2}));
  reader.fail_offset = UINT64_MAX;
  CHECK(run_step(cache, fx, {{1, 2}}));
  CHECK(cache.is_resident({1, 2}));
}

TEST_CASE("slice digests are verified on landing and a mismatch is corrupt_data naming the tensor") {
  CacheFixture fx;
  ShardLayout layout = fx.layout;
  {
    TestReader r(fx.path.string());
    for (auto& layer : layout.layers) {
      for (auto& t : layer.tensors) {
        for (uint32_t e = 0; e < layout.n_expert; ++e) {
          std::vector<std::byte> bytes(t.expert_bytes);
          r.read_sync(t.file_offset + e * t.expert_stride, bytes);
          t.digests.push_back(extent_digest(bytes));
        }
      }
    }
  }
  TestReader reader(fx.path.string());
  reader.reported_alignment = 512;
  ShardCacheOptions o = with_budget(1 << 20);
  int hook_calls = 0;
  o.verify = [&](ShardKey, std::span<const std::byte> bytes) {
    ++hook_calls;
    CHECK(bytes.size() >= 12288);
  };
  ShardCache cache(layout, reader, o);
  CHECK(run_step(cache, fx, {{0, 0}, {1, 1}}));
  CHECK(hook_calls == 2);
  reader.corrupt = true;
  auto pin = cache.acquire({0, 3});
  std::string err = error_of([&] { cache.wait(pin); });
  const TensorSlice& gate = layout.layers[0].tensors[0];
  CHECK(err.find("corrupt_data: layer 0 expert 3, tensor 'blk.0.ffn_gate_exps.weight' (slice at offset " +
                 std::to_string(gate.file_offset + 3 * gate.expert_stride) + ", 1000 bytes): XXH3-64") == 0);
  CHECK(err.find("but the index says 0x") != std::string::npos);
  // A bad digest count is refused up front.
  layout.layers[1].tensors[2].digests.pop_back();
  CHECK(error_of([&] { ShardCache c(layout, reader, with_budget(1 << 20)); })
            .find("'blk.1.ffn_down_exps.weight' has 3 digests for 4 experts") != std::string::npos);
}

TEST_CASE("wait_any hands out shards in completion order") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  reader.lifo = true;  // the last submitted read completes first
  ShardCache cache(fx.layout, reader, with_budget(1 << 20));
  auto pins = cache.acquire_all(std::vector<ShardKey>{{0, 0}, {0, 1}, {0, 2}});
  std::vector<size_t> order;
  for (int n = 0; n < 3; ++n) {
    size_t i = cache.wait_any(pins);
    CHECK(fx.pin_matches(pins[i]));
    order.push_back(i);
    pins[i].release();
  }
  CHECK(order == std::vector<size_t>{2, 1, 0});
  CHECK(error_of([&] { cache.wait_any(pins); }).find("invalid_argument: wait_any: no pin") == 0);
}

TEST_CASE("shard cache counts hits, misses, bytes, evictions and latency per layer") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, with_budget(65536));
  cache.begin_token();
  CHECK(run_step(cache, fx, {{0, 0}, {0, 1}}));
  CHECK(run_step(cache, fx, {{1, 0}, {1, 1}}));
  cache.begin_token();
  CHECK(run_step(cache, fx, {{0, 1}, {0, 2}}));
  CacheStats st = cache.stats();
  CHECK(st.tokens == 2);
  CHECK(st.layers[0].hits == 1);
  CHECK(st.layers[0].misses == 3);
  CHECK(st.layers[0].evictions == 1);
  CHECK(st.layers[0].bytes_read == 3 * 2500);
  CHECK(st.layers[1].misses == 2);
  CHECK(st.layers[1].bytes_read == 2 * 10100);
  CHECK(st.total.misses == 5);
  CHECK(st.total.reads_landed == 5);
  CHECK(st.total.hit_rate() == doctest::Approx(1.0 / 6));
  CHECK(st.resident_shards == 4);
  CHECK(st.resident_bytes == 2 * 12288 + 2 * 20480);
}

TEST_CASE("shard cache rejects keys outside the model and duplicate keys") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, with_budget(1 << 20));
  CHECK(error_of([&] { cache.acquire({2, 0}); }) ==
        "invalid_argument: layer 2 expert 0 is outside the model (2 layers x 4 experts)");
  CHECK(error_of([&] { cache.acquire_all(std::vector<ShardKey>{{0, 1}, {0, 1}}); })
            .find("listed twice") != std::string::npos);
  CHECK(error_of([&] { ShardCache c(fx.layout, reader, with_budget(1 << 20, "belady")); })
            .find("simulator only") != std::string::npos);
}

TEST_CASE("a layout reaching past the end of the file is rejected naming the tensor") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardLayout bad = fx.layout;
  bad.layers[1].tensors[2].file_offset = fx.file_size;
  std::string err = error_of([&] { ShardCache cache(bad, reader, with_budget(1 << 20)); });
  CHECK(err.find("invalid_file: tensor 'blk.1.ffn_down_exps.weight' expert 3 ends at") == 0);
  CHECK(err.find("past end of file") != std::string::npos);
}

TEST_CASE("prefetch loads speculatively without pinning and a later acquire hits") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCacheOptions o = with_budget(65536);
  o.max_speculative_in_flight = 1;
  ShardCache cache(fx.layout, reader, o);
  CHECK(cache.prefetch({0, 3}));
  CHECK_FALSE(cache.prefetch({0, 3}));  // already there
  CHECK_FALSE(cache.prefetch({0, 2}));  // cap of one in flight
  CHECK(run_step(cache, fx, {{0, 3}}));
  CacheStats st = cache.stats();
  CHECK(st.layers[0].hits == 1);
  CHECK(st.layers[0].misses == 0);
  CHECK(st.layers[0].prefetches == 1);
  // With every slot of the class pinned a prefetch quietly does nothing.
  auto a = cache.acquire({0, 0});
  auto b = cache.acquire({0, 1});
  CHECK_FALSE(cache.prefetch({0, 2}));
}

TEST_CASE("slots leave room so an O_DIRECT reader's extents land zero-copy, and the arena is registered") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  reader.reported_alignment = 512;
  {
    ShardCache cache(fx.layout, reader, with_budget(1 << 20));
    // 1000-byte slices need up to 511 bytes of pad: still one 4 KiB region each; 5000 -> 8 KiB.
    CHECK(cache.plan().classes[0].slot_bytes == 3 * 4096);
    CHECK(cache.plan().classes[1].slot_bytes == 2 * 8192 + 4096);
    CHECK(reader.registered.size() == cache.plan().arena_bytes);
    for (uint32_t e = 0; e < 4; ++e) {
      CHECK(run_step(cache, fx, {{0, e}}));
      CHECK(run_step(cache, fx, {{1, e}}));
    }
    CHECK(reader.submitted == 24);
    CHECK(reader.misplaced == 0);
  }
  CHECK(reader.registered.empty());  // unregistered when the cache goes
  // A slice whose size is one byte short of a region boundary needs the next region for its pad.
  ShardLayout tight = fx.layout;
  tight.layers[0].tensors[0].expert_bytes = 4000;
  CHECK(slot_bytes(tight, 0, 512) == 2 * 4096 + 4096 + 4096);
  CHECK(slot_bytes(tight, 0, 1) == 3 * 4096);
  CHECK(slot_bytes(tight, 0, 3) == 3 * 4096);  // not a power of two: no placement
}

TEST_CASE("acquire_all into caller-owned pins releases what they held and checks their count") {
  CacheFixture fx;
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, with_budget(65536));
  std::vector<ShardCache::Pin> pins(2);
  std::vector<ShardKey> a = {{0, 0}, {0, 1}}, b = {{0, 2}, {0, 3}};
  cache.acquire_all(a, pins);
  for (auto& p : pins) cache.wait(p);
  CHECK(cache.stats().pinned_shards == 2);
  // Reusing the same pins: the old ones are released first, so the 2-slot class has room.
  cache.acquire_all(b, pins);
  for (auto& p : pins) {
    cache.wait(p);
    CHECK(fx.pin_matches(p));
  }
  CHECK(cache.stats().pinned_shards == 2);
  CHECK(error_of([&] { cache.acquire_all(a, std::span<ShardCache::Pin>(pins.data(), 1)); })
            .find("2 keys but room for 1 pins") != std::string::npos);
}
