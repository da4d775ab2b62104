// plan_budget: how a model runs inside a budget, decided from sizes alone (a pure function).
//
// The engine states what each part needs (core/arch/architecture.h says where the sizes come
// from) and the planner picks the first way that fits:
//   1. every non-routed weight resident, the requested batch;
//   2. layer streaming (where the architecture can): only what never streams stays resident, the
//      blocks' own tensors and the output head go through a layer cache of two units per size
//      class when they fit (the next one read while one computes), else one;
//   3. the same with a smaller batch: the largest batch in [1, requested] at which (1) or (2)
//      fits (a binary search: the scratch never shrinks as the batch grows), (1) preferred.
// The minimum is the smaller of (1) and (2) at batch 1:
//   resident + layer cache (if streamed) + KV cache + recurrent state + scratch at batch 1
//   + one MoE layer's experts + --gpu staging.
// Below it, or when no batch fits: Error(budget) naming the minimum in MiB and bytes and its parts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/error.h"

namespace sluice::core {

struct BudgetInputs {
  uint64_t budget = 0;          // the ceiling; 0: unlimited (the requested batch, all resident)
  int64_t requested_batch = 1;
  uint64_t resident = 0;        // every non-routed weight (and in core, the experts)
  bool can_stream_layers = false;
  uint64_t lean_resident = 0;   // what stays resident while layers stream
  uint64_t layer_min = 0;       // the layer cache: one unit per size class
  uint64_t layer_two = 0;       //   two units per size class (capped at all of them)
  uint64_t kv = 0;              // KV cache of every sequence
  uint64_t recurrent = 0;       // recurrent state of every sequence
  uint64_t expert_min = 0;      // one MoE layer's working set (0 in core)
  // Scratch at a batch, with or without layer streaming; --gpu staging at a batch (may be empty).
  std::function<uint64_t(int64_t batch, bool layers_stream)> scratch;
  std::function<uint64_t(int64_t batch)> gpu_staging;
  std::string model_path;       // for messages
};

// What one way of running needs, in bytes.
struct BudgetNeed {
  uint64_t resident = 0, layers = 0, kv = 0, recurrent = 0, scratch = 0, experts = 0, gpu_staging = 0;
  uint64_t total() const { return resident + layers + kv + recurrent + scratch + experts + gpu_staging; }
};

struct BudgetPlan {
  BudgetNeed minimum;           // the smallest budget this model runs in, by parts
  bool minimum_streams = false; // the minimum streams layers
  bool stream_layers = false;   // the chosen way
  uint64_t layer_arena = 0;     // layer cache bytes (0: all resident)
  int64_t n_batch = 1;          // the batch in force
  BudgetNeed chosen;            // the chosen way's needs (its expert part is the minimum)
};

BudgetPlan plan_budget(const BudgetInputs& in);

// Error(budget): "budget X is below the minimum N MiB (B bytes) for 'path' (parts)".
Error budget_error(const BudgetNeed& minimum, uint64_t budget, const std::string& path, bool layers_streamed);

}  // namespace sluice::core
