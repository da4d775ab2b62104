// The architecture registry: GGUF `general.architecture` -> Architecture (core/arch/architecture.h).
// This file and each architecture's own folder are the only places that test an architecture
// name. GPU support is wired here too: each architecture gives the VRAM tier its model's shape
// (core/gpu/gpu_model_shape.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/arch/architecture.h"
#include "core/gpu/gpu_tier.h"
#include "core/gpu/vram_plan.h"

namespace sluice::core {

// Error(unsupported) naming the file's architecture and the supported ones.
const Architecture& architecture_for(const GgufFile& file);
// Whether sluice computes this file: a registered architecture, with token embeddings present
// (a file of another kind, e.g. an importance matrix, only has metadata and tensors to show).
bool is_runnable(const GgufFile& file);

// What --gpu needs of an architecture: its model as the VRAM tier sees it. architecture_gpu() is
// null where --gpu is not supported.
struct ArchitectureGpu {
  virtual GpuModelShape shape(const ArchModel& model) const = 0;
  // Page-locked host staging at a batch, of a planned or loaded model.
  uint64_t host_staging(const ArchModel& model, int64_t n_batch) const;
  std::unique_ptr<GpuTier> make_tier(const ArchModel& model, TrackedExpertSource& experts, kernels::ThreadPool& pool,
                                     int64_t n_batch, std::span<std::byte> host_arena,
                                     const GpuTierOptions& options) const;

 protected:
  ~ArchitectureGpu() = default;
};
const ArchitectureGpu* architecture_gpu(const Architecture& architecture);

}  // namespace sluice::core
