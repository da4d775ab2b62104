// plan_budget (core/arch/budget_plan.h): one pure function decides every architecture's batch,
// layer streaming and minimum from sizes alone.
#include <doctest/doctest.h>

#include <random>

#include "common/error.h"
#include "core/arch/budget_plan.h"
#include "kernels/matvec.h"

namespace {

using sluice::core::BudgetInputs;
using sluice::core::BudgetPlan;
using sluice::core::plan_budget;

// Scratch grows with the batch (a fixed part plus a per-row part), a little more without
// layer streaming (the predictor's scratch).
BudgetInputs inputs(uint64_t budget, int64_t batch, uint64_t per_row, bool can_stream) {
  BudgetInputs in;
  in.budget = budget;
  in.requested_batch = batch;
  in.resident = 10'000'000;
  in.can_stream_layers = can_stream;
  in.lean_resident = 2'000'000;
  in.layer_min = 1'000'000;
  in.layer_two = 2'000'000;
  in.kv = 500'000;
  in.recurrent = 300'000;
  in.expert_min = 700'000;
  in.scratch = [per_row](int64_t b, bool layers) { return 100'000 + per_row * static_cast<uint64_t>(b) + (layers ? 0 : 5'000); };
  in.model_path = "m.gguf";
  return in;
}

// The reference the planner must agree with: step down from the requested batch by one; a
// lowered batch of at least one token group keeps whole groups (kernels::kGemmTokenGroup), so
// that its products round as the full batch's do.
int64_t step_down(const BudgetInputs& in) {
  for (int64_t b = in.requested_batch; b >= 1; --b) {
    const uint64_t common = in.kv + in.recurrent + in.expert_min;
    const bool fits = in.resident + common + in.scratch(b, false) <= in.budget ||
                      (in.can_stream_layers && in.lean_resident + in.layer_min + common + in.scratch(b, true) <= in.budget);
    if (!fits) continue;
    if (b < in.requested_batch && b >= sluice::kernels::kGemmTokenGroup) return b - b % sluice::kernels::kGemmTokenGroup;
    return b;
  }
  return 0;
}

}  // namespace

TEST_CASE("plan_budget picks the largest batch that fits, in whole token groups when lowered, for any budget") {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const bool can_stream = i % 2 == 0;
    const uint64_t per_row = 1000 + rng() % 50'000;
    BudgetInputs in = inputs(0, 1 + static_cast<int64_t>(rng() % 512), per_row, can_stream);
    in.budget = 3'000'000 + rng() % 30'000'000;
    CAPTURE(in.budget);
    CAPTURE(in.requested_batch);
    const int64_t expected = step_down(in);
    if (expected == 0) {
      CHECK_THROWS_AS(plan_budget(in), sluice::Error);
      continue;
    }
    const BudgetPlan p = plan_budget(in);
    CHECK(p.n_batch == expected);
    if (p.n_batch < in.requested_batch && p.n_batch >= 4) CHECK(p.n_batch % 4 == 0);
    CHECK(p.chosen.total() <= in.budget);
    // Resident is preferred whenever it fits at that batch.
    const bool resident_fits = in.resident + in.kv + in.recurrent + in.expert_min + in.scratch(p.n_batch, false) <= in.budget;
    CHECK(p.stream_layers == !resident_fits);
    if (p.stream_layers) CHECK((p.layer_arena == in.layer_two || p.layer_arena == in.layer_min));
  }
}

TEST_CASE("plan_budget states the minimum by parts and refuses below it with Error(budget) naming them") {
  BudgetInputs in = inputs(0, 64, 10'000, true);
  const BudgetPlan unlimited = plan_budget(in);
  CHECK(unlimited.n_batch == 64);
  CHECK_FALSE(unlimited.stream_layers);
  CHECK(unlimited.minimum_streams);  // lean + one layer is smaller than all resident
  const uint64_t min = unlimited.minimum.total();
  CHECK(min == 2'000'000 + 1'000'000 + 500'000 + 300'000 + 700'000 + 110'000);
  in.budget = min;
  const BudgetPlan at_min = plan_budget(in);
  CHECK(at_min.n_batch == 1);
  CHECK(at_min.stream_layers);
  CHECK(at_min.layer_arena == in.layer_min);
  in.budget = min - 1;
  try {
    plan_budget(in);
    FAIL("a budget below the minimum was accepted");
  } catch (const sluice::Error& e) {
    CHECK(e.code() == sluice::ErrorCode::budget);
    const std::string m = e.what();
    CHECK(m.find("below the minimum") != std::string::npos);
    CHECK(m.find("one streamed layer") != std::string::npos);
    CHECK(m.find("recurrent state") != std::string::npos);
    CHECK(m.find("one MoE layer's experts") != std::string::npos);
  }
}
