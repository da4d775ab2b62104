#include "core/arch/budget_plan.h"

#include "common/units.h"
#include "kernels/matvec.h"

namespace sluice::core {

namespace {

uint64_t mib_ceil(uint64_t bytes) { return (bytes + (1ull << 20) - 1) >> 20; }

BudgetNeed need(const BudgetInputs& in, bool layers, uint64_t layer_arena, int64_t batch) {
  return BudgetNeed{layers ? in.lean_resident : in.resident,
                    layers ? layer_arena : 0,
                    in.kv,
                    in.recurrent,
                    in.scratch(batch, layers),
                    in.expert_min,
                    in.gpu_staging ? in.gpu_staging(batch) : 0};
}

bool fits(const BudgetInputs& in, int64_t batch) {
  if (need(in, false, 0, batch).total() <= in.budget) return true;
  return in.can_stream_layers && need(in, true, in.layer_min, batch).total() <= in.budget;
}

}  // namespace

Error budget_error(const BudgetNeed& min, uint64_t budget, const std::string& path, bool layers_streamed) {
  std::string parts = "resident weights " + human_bytes(min.resident);
  if (layers_streamed) parts += " + one streamed layer " + human_bytes(min.layers);
  parts += " + KV cache " + human_bytes(min.kv);
  if (min.recurrent) parts += " + recurrent state " + human_bytes(min.recurrent);
  parts += " + scratch at batch 1 " + human_bytes(min.scratch);
  if (min.experts) parts += " + one MoE layer's experts " + human_bytes(min.experts);
  if (min.gpu_staging) parts += " + --gpu page-locked staging " + human_bytes(min.gpu_staging);
  return Error(ErrorCode::budget, "budget " + human_bytes(budget) + " is below the minimum " +
                                      std::to_string(mib_ceil(min.total())) + " MiB (" + std::to_string(min.total()) +
                                      " bytes) for '" + path + "' (" + parts + ")");
}

BudgetPlan plan_budget(const BudgetInputs& in) {
  if (in.requested_batch < 1) throw Error(ErrorCode::invalid_argument, "the batch must be at least 1 token");
  BudgetPlan plan;
  plan.minimum = need(in, false, 0, 1);
  if (in.can_stream_layers && need(in, true, in.layer_min, 1).total() < plan.minimum.total()) {
    plan.minimum = need(in, true, in.layer_min, 1);
    plan.minimum_streams = true;
  }
  plan.n_batch = in.requested_batch;
  if (in.budget == 0) {
    plan.chosen = need(in, false, 0, plan.n_batch);
    return plan;
  }
  if (!fits(in, 1)) throw budget_error(plan.minimum, in.budget, in.model_path, plan.minimum_streams);
  // The largest batch that fits: fits(1) holds, and fits(b) implies fits(b - 1).
  int64_t lo = 1, hi = in.requested_batch;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(in, mid)) lo = mid; else hi = mid - 1;
  }
  // A lowered batch keeps whole token groups, so that it computes what the full batch would.
  if (lo < in.requested_batch && lo >= kernels::kGemmTokenGroup) lo -= lo % kernels::kGemmTokenGroup;
  plan.n_batch = lo;
  if (need(in, false, 0, lo).total() <= in.budget) {
    plan.chosen = need(in, false, 0, lo);
    return plan;
  }
  plan.stream_layers = true;
  plan.layer_arena = need(in, true, in.layer_two, lo).total() <= in.budget ? in.layer_two : in.layer_min;
  plan.chosen = need(in, true, plan.layer_arena, lo);
  return plan;
}

}  // namespace sluice::core
