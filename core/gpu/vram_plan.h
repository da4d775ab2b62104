// VramPlan: how GpuTier spends its VRAM budget, decided from the model's shapes alone.
//
//   budget = workspace + resident matrices (each aligned to 256 bytes) + n_slots x slot_bytes
//
// GpuModelShape (core/gpu/gpu_model_shape.h builds it for each architecture) lists the matrices
// of non-expert tensors in the order the forward pass first multiplies with them. plan_vram takes
// them in that order, each one that fits in what is left (a big output head that does not fit
// leaves room for later, smaller ones); matrices whose type has no CUDA kernel are skipped.
// Expert slots get the rest, capped at one slot per routed (layer, expert).
//
// Plain C++ so that tests can check the accounting without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/ggml_type.h"
#include "core/gguf/tensor.h"

namespace sluice::core {

constexpr uint64_t kVramAlign = 256;
inline uint64_t vram_align(uint64_t n) { return (n + kVramAlign - 1) / kVramAlign * kVramAlign; }

struct ResidentMatrix {
  const Tensor* tensor = nullptr;
  uint64_t bytes = 0;  // all of its rows
};

// One expert of a block (gate, up, down back to back, each aligned): the largest over MoE
// layers, and each part's offset in a slot for block `il`. Built by GpuModelShape.
struct ExpertSlotShape {
  uint64_t slot_bytes = 0;
  std::vector<std::array<uint64_t, 3>> part_offset;  // per block
  std::vector<std::array<uint64_t, 3>> part_bytes;   // per block (0 for dense blocks)
  uint64_t routed_experts = 0;                        // (layer, expert) pairs
};

// What the VRAM tier needs to know of a model, whatever its architecture.
struct GpuModelShape {
  std::vector<ResidentMatrix> resident;  // non-expert weight products, in order of first use
  ExpertSlotShape experts;
  int64_t max_dim = 1;                   // widest input or output of any weight product
  int64_t n_layer = 0, n_expert = 0;
};

struct VramPlan {
  uint64_t workspace = 0;
  std::vector<int64_t> resident_offset;  // per resident_in_use_order entry, -1 when it stays on the CPU
  uint64_t resident_bytes = 0;           // aligned total of those on the GPU
  uint32_t resident_on_gpu = 0, resident_on_cpu = 0;
  uint64_t resident_cpu_bytes = 0;
  uint64_t expert_slot_bytes = 0;
  uint32_t expert_slots = 0;
  uint64_t total() const { return workspace + resident_bytes + expert_slot_bytes * expert_slots; }
};

// Error(budget) when the budget cannot hold the workspace. `supported(type)` says whether the
// GPU has kernels for a weight type.
VramPlan plan_vram(uint64_t budget, uint64_t workspace, const std::vector<ResidentMatrix>& resident,
                   const ExpertSlotShape& experts, const std::function<bool(GgmlType)>& supported);

}  // namespace sluice::core
