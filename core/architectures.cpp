#include "core/architectures.h"

#include <string>
#include <string_view>

#include "common/error.h"
#include "core/gpu/gpu_model_shape.h"
#include "core/kimi_k3/kimi_k3_architecture.h"
#include "core/llama/llama_architecture.h"

namespace sluice::core {

namespace {

const LlamaArchitecture kLlama;
const KimiK3Architecture kKimiK3;

// An architecture's GPU support: its ArchModel's model, given to gpu_model_shape.
template <class ArchModelType>
struct GpuOf final : ArchitectureGpu {
  GpuModelShape shape(const ArchModel& m) const override {
    return gpu_model_shape(static_cast<const ArchModelType&>(m).model());
  }
};
const GpuOf<LlamaArchModel> kLlamaGpu;
const GpuOf<KimiK3ArchModel> kKimiK3Gpu;

// The registry: general.architecture -> Architecture (null: not one sluice computes).
const Architecture* find_architecture(std::string_view name) {
  if (name == "llama" || name == "qwen3moe" || name == "deepseek2") return &kLlama;
  if (name == "kimi-k3") return &kKimiK3;
  return nullptr;
}

}  // namespace

bool is_runnable(const GgufFile& file) {
  return find_architecture(file.architecture()) != nullptr && file.find_tensor("token_embd.weight") != nullptr;
}

const Architecture& architecture_for(const GgufFile& file) {
  const std::string& name = file.architecture();
  if (const Architecture* arch = find_architecture(name)) return *arch;
  throw Error(ErrorCode::unsupported, "architecture '" + name + "' of '" + file.path() +
                                          "' is not supported (supported: llama, qwen3moe, deepseek2, kimi-k3)");
}

uint64_t ArchitectureGpu::host_staging(const ArchModel& model, int64_t n_batch) const {
  return plan_gpu_host_staging(shape(model), n_batch).total();
}

std::unique_ptr<GpuTier> ArchitectureGpu::make_tier(const ArchModel& model, TrackedExpertSource& experts,
                                                    kernels::ThreadPool& pool, int64_t n_batch,
                                                    std::span<std::byte> host_arena, const GpuTierOptions& options) const {
  return make_gpu_tier(shape(model), experts, pool, n_batch, host_arena, options);
}

const ArchitectureGpu* architecture_gpu(const Architecture& architecture) {
  if (&architecture == &kLlama) return &kLlamaGpu;
  if (&architecture == &kKimiK3) return &kKimiK3Gpu;
  return nullptr;
}

}  // namespace sluice::core
