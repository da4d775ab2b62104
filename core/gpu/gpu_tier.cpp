// GpuTier's build-independent parts: counters, descriptions, and the factory of CPU-only builds.
#include "core/gpu/gpu_tier.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "core/gpu/vram_plan.h"

namespace sluice::core {

GpuCounters GpuCounters::operator-(const GpuCounters& b) const {
  GpuCounters d;
  d.products_gpu = products_gpu - b.products_gpu;
  d.products_cpu = products_cpu - b.products_cpu;
  d.expert_hits = expert_hits - b.expert_hits;
  d.expert_misses = expert_misses - b.expert_misses;
  d.experts_copied = experts_copied - b.experts_copied;
  d.expert_copy_bytes = expert_copy_bytes - b.expert_copy_bytes;
  d.expert_cpu_fallbacks = expert_cpu_fallbacks - b.expert_cpu_fallbacks;
  d.upload_bytes = upload_bytes - b.upload_bytes;
  d.download_bytes = download_bytes - b.download_bytes;
  return d;
}

std::string GpuTier::describe() const {
  const GpuPlan& p = plan();
  char share[64] = "";
  if (p.routed_experts)
    std::snprintf(share, sizeof share, " (%.0f%% of routed experts)",
                  100.0 * static_cast<double>(p.expert_slots) / static_cast<double>(p.routed_experts));
  std::string s = "VRAM " + human_bytes(p.vram_budget) + " on " + p.device + ": workspace " +
                  human_bytes(p.workspace_bytes) + " + resident " + human_bytes(p.resident_bytes) + " (" +
                  std::to_string(p.resident_tensors) + " matrices";
  if (p.resident_on_cpu) s += ", " + std::to_string(p.resident_on_cpu) + " left on the CPU";
  s += ") + " + std::to_string(p.expert_slots) + " expert slots x " + human_bytes(p.expert_slot_bytes) + share;
  s += p.arena_page_locked ? "; RAM arena page-locked" : "; RAM arena pageable (synchronous copies)";
  if (p.rates.h2d_bytes_per_s > 0 && p.rates.cpu_bytes_per_s > 0)
    s += "; " + VramCostModel(p.rates).describe(p.expert_slot_bytes);
  return s;
}

std::string GpuTier::describe(const GpuCounters& c) {
  const uint64_t lookups = c.expert_hits + c.expert_misses;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "gpu products %llu, cpu products %llu; VRAM expert hits %llu of %llu (%.1f%%), copied up %llu (%s), "
                "CPU fallbacks %llu; uploaded %s, downloaded %s",
                static_cast<unsigned long long>(c.products_gpu), static_cast<unsigned long long>(c.products_cpu),
                static_cast<unsigned long long>(c.expert_hits), static_cast<unsigned long long>(lookups),
                lookups ? 100.0 * static_cast<double>(c.expert_hits) / static_cast<double>(lookups) : 0.0,
                static_cast<unsigned long long>(c.experts_copied), human_bytes(c.expert_copy_bytes).c_str(),
                static_cast<unsigned long long>(c.expert_cpu_fallbacks), human_bytes(c.upload_bytes).c_str(),
                human_bytes(c.download_bytes).c_str());
  return buf;
}

GpuHostStaging plan_gpu_host_staging(const GpuModelShape& model, int64_t n_batch) {
  constexpr uint64_t kStagingBytes = 64ull << 20;  // per direction
  GpuHostStaging s;
  s.max_dim = std::max<int64_t>(model.max_dim, 1);
  s.chunk_tokens = std::clamp<int64_t>(static_cast<int64_t>(kStagingBytes / 4) / s.max_dim, 1, std::max<int64_t>(n_batch, 1));
  s.buffer_bytes = static_cast<uint64_t>(s.chunk_tokens * s.max_dim) * 4;
  return s;
}

double measure_cpu_matvec_rate(const GpuModelShape& model, kernels::ThreadPool& pool) {
  const ResidentMatrix* pick = nullptr;
  for (const ResidentMatrix& m : model.resident)
    if (m.bytes <= (256ull << 20) && (!pick || m.bytes > pick->bytes)) pick = &m;
  if (!pick) return 0;
  const kernels::WeightMatrix w = pick->tensor->matrix();
  std::vector<float> x(static_cast<size_t>(w.n_cols), 0.5f), y(static_cast<size_t>(w.n_rows));
  std::vector<std::byte> scratch(kernels::matmul_scratch_bytes(w.type, w.n_cols, 1, pool.size()) + 64);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::matvec(w, x, y, scratch, pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  return static_cast<double>(pick->bytes) / std::max(best, 1e-9);
}

#if !SLUICE_HAVE_CUDA
bool gpu_tier_built() { return false; }

void require_gpu() {
  throw Error(ErrorCode::unsupported,
              "--gpu: this sluice was built without CUDA (install the CUDA toolkit so nvcc is found, then rebuild)");
}

std::unique_ptr<GpuTier> make_gpu_tier(const GpuModelShape&, TrackedExpertSource&, kernels::ThreadPool&, int64_t,
                                       std::span<std::byte>, const GpuTierOptions&) {
  require_gpu();
  return nullptr;
}
#endif

}  // namespace sluice::core
