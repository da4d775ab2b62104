#include "core/architectures.h"

#include <string>
#include <string_view>

#include "common/error.h"
#include "core/kimi_k3/kimi_k3_architecture.h"
#include "core/llama/llama_architecture.h"

namespace sluice::core {

namespace {

const LlamaArchitecture kLlama;
const KimiK3Architecture kKimiK3;

struct LlamaGpu final : ArchitectureGpu {
  static const Model& model_of(const ArchModel& m) { return static_cast<const LlamaArchModel&>(m).model(); }
  uint64_t host_staging(const ArchModel& m, int64_t n_batch) const override {
    return plan_gpu_host_staging(model_of(m), n_batch).total();
  }
  std::unique_ptr<GpuTier> make_tier(const ArchModel& m, TrackedExpertSource& experts, kernels::ThreadPool& pool,
                                     int64_t n_batch, std::span<std::byte> host_arena,
                                     const GpuTierOptions& options) const override {
    return make_gpu_tier(model_of(m), experts, pool, n_batch, host_arena, options);
  }
};
const LlamaGpu kLlamaGpu;

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

const ArchitectureGpu* architecture_gpu(const Architecture& architecture) {
  return &architecture == &kLlama ? &kLlamaGpu : nullptr;
}

}  // namespace sluice::core
