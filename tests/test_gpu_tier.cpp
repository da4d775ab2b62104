// The VRAM tier's decisions, checked without a GPU: the cost model, the VRAM expert cache's
// bookkeeping, the VRAM plan, and the expert tracking that tells the tier which expert a pinned
// host view belongs to.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "core/experts/expert_source.h"
#include "core/gpu/gpu_model_shape.h"
#include "core/gpu/gpu_tier.h"
#include "core/llama/model.h"
#include "core/experts/tracked_expert_source.h"
#include "core/gpu/vram_cost_model.h"
#include "core/gpu/vram_expert_cache.h"
#include "core/gpu/vram_plan.h"
#include "core/llama/in_core_experts.h"
#include "tests/test_support.h"

using sluice::Error;
using sluice::ErrorCode;
using sluice::core::TierRates;
using sluice::core::VramCostModel;
using sluice::core::VramExpertCache;

namespace {

std::string q4_model() { return (sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string(); }

}  // namespace

TEST_CASE("the cost model copies an expert up when the bus moves it faster than the CPU computes its tokens") {
  // CPU 1.5x faster than the bus: one token stays on the CPU, two tokens go up.
  VramCostModel m(TierRates{.h2d_bytes_per_s = 10e9, .cpu_bytes_per_s = 15e9, .gpu_bytes_per_s = 0, .copy_latency_s = 0});
  const uint64_t expert = 36ull << 20;
  CHECK_FALSE(m.copy_up(expert, 1));
  CHECK(m.copy_up(expert, 2));
  CHECK(m.copy_up(expert, 64));
  CHECK(m.cpu_seconds(expert, 4) == doctest::Approx(4 * m.cpu_seconds(expert, 1)));
  CHECK(m.describe(expert).find("from 2 tokens") != std::string::npos);

  // A bus faster than the CPU copies even a decode token's expert up.
  VramCostModel fast_bus(TierRates{.h2d_bytes_per_s = 50e9, .cpu_bytes_per_s = 20e9, .gpu_bytes_per_s = 3e12});
  CHECK(fast_bus.copy_up(expert, 1));
  CHECK(fast_bus.describe(expert).find("from 1 token ") != std::string::npos);
  // ... but not a tiny matrix, where the fixed cost of starting a copy dominates.
  CHECK_FALSE(fast_bus.copy_up(4096, 1));
  // The GPU's own time counts on the copy side.
  VramCostModel slow_gpu(TierRates{.h2d_bytes_per_s = 50e9, .cpu_bytes_per_s = 20e9, .gpu_bytes_per_s = 20e9});
  CHECK_FALSE(slow_gpu.copy_up(expert, 1));
  CHECK(slow_gpu.copy_up(expert, 2));
  // Weights already in VRAM: a GPU product unless the round trip outlasts the CPU's work.
  CHECK(fast_bus.gpu_product(expert, 1));
  CHECK_FALSE(fast_bus.gpu_product(64 << 10, 1));  // 3 us on the CPU against a 20 us round trip
  CHECK(fast_bus.gpu_product(64 << 10, 64));
  CHECK(m.gpu_product(4096, 1));  // no round-trip cost configured
  // A CPU much faster than the bus never copies a decode token up.
  VramCostModel slow_bus(TierRates{.h2d_bytes_per_s = 1e9, .cpu_bytes_per_s = 100e9});
  CHECK_FALSE(slow_bus.copy_up(expert, 1));
  CHECK_FALSE(slow_bus.copy_up(expert, 99));
  CHECK(slow_bus.copy_up(expert, 101));
}

TEST_CASE("the cost model rejects rates that are not positive") {
  CHECK_THROWS_AS(VramCostModel(TierRates{.h2d_bytes_per_s = 0, .cpu_bytes_per_s = 1e9}), Error);
  try {
    VramCostModel m(TierRates{.h2d_bytes_per_s = 1e9, .cpu_bytes_per_s = -1});
    FAIL("a negative CPU rate was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("positive") != std::string::npos);
  }
}

TEST_CASE("the VRAM expert cache evicts the least recently used unpinned expert and never a pinned one") {
  VramExpertCache c(2, 4, 8);
  CHECK(c.find(1, 3) == -1);
  const int64_t a = c.insert(1, 3), b = c.insert(2, 5);
  CHECK(a != b);
  CHECK(c.occupied() == 2);
  CHECK(c.find(1, 3) == a);  // (2, 5) is now the least recent
  CHECK(c.insert(0, 0) == b);
  CHECK(c.find(2, 5) == -1);
  CHECK(c.find(0, 0) == b);
  CHECK(c.evictions() == 1);
  CHECK(c.insert(0, 0) == b);  // already resident: no eviction
  CHECK(c.evictions() == 1);

  c.pin(a);  // (1, 3) is the least recent now, but pinned: (0, 0) goes
  CHECK(c.insert(3, 7) == b);
  c.pin(b);
  CHECK(c.insert(2, 2) == -1);  // every slot pinned: the caller computes on the CPU
  CHECK(c.is_pinned(a));
  c.unpin(a);
  c.unpin(b);
  CHECK_THROWS_AS(c.unpin(b), Error);
  CHECK(c.insert(2, 2) == a);
  CHECK_THROWS_AS(c.find(4, 0), Error);  // outside the model
  CHECK_THROWS_AS(c.find(0, 8), Error);

  VramExpertCache none(0, 4, 8);
  CHECK(none.insert(0, 0) == -1);
}

TEST_CASE("the frequency policy keeps the expert used most often, even when it was not used last") {
  VramExpertCache c(2, 1, 8, VramExpertCache::parse_policy("freq"));
  const int64_t hot = c.insert(0, 1);
  c.insert(0, 2);
  for (int i = 0; i < 5; ++i) CHECK(c.find(0, 1) == hot);
  CHECK(c.find(0, 2) >= 0);  // the most recent, but used once against five times
  c.find(0, 3);
  const int64_t slot = c.insert(0, 3);
  CHECK(slot != hot);
  CHECK(c.find(0, 2) == -1);
  CHECK(c.find(0, 1) == hot);
  CHECK_THROWS_WITH_AS(VramExpertCache::parse_policy("mru"), doctest::Contains("lru or freq"), Error);
}

TEST_CASE("the VRAM plan takes resident matrices in order of use and gives the rest to expert slots") {
  const auto model = sluice::core::Model::load(q4_model(), {.load_routed_experts = false});
  const auto model_shape = sluice::core::gpu_model_shape(model);
  const auto& resident = model_shape.resident;
  REQUIRE(resident.size() > 4);
  const auto& c = model.config();
  const auto& L0 = model.layer(0);
  CHECK(resident.front().tensor == (L0.wq_a ? &L0.wq_a : &L0.wq));
  CHECK(resident.back().tensor == &model.output());
  const auto& shape = model_shape.experts;
  CHECK(shape.slot_bytes > 0);
  int64_t n_moe = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) n_moe += c.is_moe_layer(il) ? 1 : 0;
  CHECK(shape.routed_experts == static_cast<uint64_t>(n_moe * c.n_expert));

  auto all = [](sluice::GgmlType) { return true; };
  uint64_t resident_total = 0;
  for (const auto& m : resident) resident_total += sluice::core::vram_align(m.bytes);
  const uint64_t workspace = 1 << 20;

  // Room for everything: every matrix, one slot per routed expert, no more.
  auto big = sluice::core::plan_vram(1ull << 40, workspace, resident, shape, all);
  CHECK(big.resident_on_gpu == resident.size());
  CHECK(big.resident_bytes == resident_total);
  CHECK(big.expert_slots == shape.routed_experts);

  // Room for the resident matrices and three experts.
  const uint64_t budget = workspace + resident_total + 3 * shape.slot_bytes + shape.slot_bytes / 2;
  auto three = sluice::core::plan_vram(budget, workspace, resident, shape, all);
  CHECK(three.expert_slots == 3);
  CHECK(three.total() <= budget);

  // Room for the first matrix only: later ones stay on the CPU unless they fit what is left.
  const uint64_t first = sluice::core::vram_align(resident.front().bytes);
  auto tight = sluice::core::plan_vram(workspace + first, workspace, resident, shape, all);
  CHECK(tight.resident_offset.front() == 0);
  CHECK(tight.resident_on_cpu == resident.size() - 1);
  CHECK(tight.expert_slots == 0);
  CHECK(tight.total() <= workspace + first);

  // A type without GPU kernels stays on the CPU whatever the room.
  const sluice::GgmlType skipped = resident.front().tensor->type;
  auto typed = sluice::core::plan_vram(1ull << 40, workspace, resident, shape,
                                       [&](sluice::GgmlType t) { return t != skipped; });
  CHECK(typed.resident_offset.front() == -1);
  CHECK(typed.resident_on_cpu >= 1);

  CHECK_THROWS_WITH_AS(sluice::core::plan_vram(workspace - 1, workspace, resident, shape, all),
                       doctest::Contains("cannot hold the GPU workspace"), Error);
}

namespace {
struct CountingListener final : sluice::core::ExpertReleaseListener {
  std::vector<std::pair<int, int>> released;
  void on_release(int layer, int expert) override { released.emplace_back(layer, expert); }
};
}  // namespace

TEST_CASE("the tracked expert source names the expert of each pinned view and forgets it on release") {
  const auto model = sluice::core::Model::load(q4_model());
  sluice::core::InCoreExpertSource inner(model);
  const auto& c = model.config();
  sluice::core::TrackedExpertSource tracked(inner, static_cast<int>(c.n_expert));
  CountingListener listener;
  tracked.set_listener(&listener);
  int layer = 0;
  while (!c.is_moe_layer(layer)) ++layer;

  sluice::core::PinnedExpertPart p;
  sluice::core::ExpertWeights w;
  {
    sluice::core::ExpertPin pin(tracked, layer, 2);
    w = pin.weights();
    CHECK(tracked.pinned() == 1);
    REQUIRE(tracked.find(w.up.data, p));
    CHECK(p.layer == layer);
    CHECK(p.expert == 2);
    CHECK(p.part == 1);
    REQUIRE(tracked.find(w.down.data, p));
    CHECK(p.part == 2);
    CHECK(p.weights->gate.data == w.gate.data);
    CHECK_FALSE(tracked.find(w.up.data + 1, p));  // only the start of a view names it
    CHECK_FALSE(tracked.find(model.layer(0).wo.data ? model.layer(0).wo.data : model.output().data, p));
    {
      sluice::core::ExpertPin again(tracked, layer, 2);  // pinned twice: one entry
      sluice::core::ExpertPin other(tracked, layer, 3);
      CHECK(tracked.pinned() == 2);
      REQUIRE(tracked.find(other.weights().gate.data, p));
      CHECK(p.expert == 3);
    }
    CHECK(listener.released == std::vector<std::pair<int, int>>{{layer, 3}});
    CHECK(tracked.find(w.up.data, p));
  }
  CHECK(tracked.pinned() == 0);
  CHECK_FALSE(tracked.find(w.up.data, p));
  CHECK(listener.released.back() == std::pair<int, int>{layer, 2});
  CHECK(listener.released.size() == 2);
}

TEST_CASE("the CPU matvec rate of the cost model is measured on a resident matrix") {
  const auto model = sluice::core::Model::load(q4_model(), {.load_routed_experts = false});
  sluice::kernels::ThreadPool pool(1);
  const double rate = sluice::core::measure_cpu_matvec_rate(sluice::core::gpu_model_shape(model), pool);
  MESSAGE("CPU matvec " << rate / 1e9 << " GB/s on one thread");
  CHECK(rate > 1e6);
}

TEST_CASE("the GPU tier's counters subtract per phase and print as one line") {
  sluice::core::GpuCounters before, after;
  before.products_gpu = 10;
  before.expert_hits = 3;
  after.products_gpu = 25;
  after.products_cpu = 4;
  after.expert_hits = 9;
  after.expert_misses = 3;
  after.experts_copied = 2;
  after.expert_copy_bytes = 3ull << 20;
  after.expert_cpu_fallbacks = 1;
  const sluice::core::GpuCounters d = after - before;
  CHECK(d.products_gpu == 15);
  CHECK(d.expert_hits == 6);
  const std::string line = sluice::core::GpuTier::describe(d);
  CHECK(line.find("gpu products 15, cpu products 4") != std::string::npos);
  CHECK(line.find("VRAM expert hits 6 of 9 (66.7%)") != std::string::npos);
  CHECK(line.find("copied up 2 (3.0 MiB)") != std::string::npos);
  CHECK(line.find("CPU fallbacks 1") != std::string::npos);
  CHECK(line.find('\n') == std::string::npos);
}
