// GpuTier: the VRAM tier above the RAM expert cache (`--gpu`, `--vram SIZE`).
//
// What lives in VRAM (one budget, `vram_bytes`; default: the device's free memory minus a
// margin), planned once at start-up:
//   workspace        activations in and out of one product (and as much page-locked host
//                    staging): a product of n tokens is done in chunks of `chunk_tokens`
//   resident         non-expert weight matrices (attention, router, dense FFN, shared experts,
//                    output head), uploaded in the order the forward pass uses them, each one
//                    that fits; a matrix that does not fit (or has a type without CUDA kernels)
//                    stays a CPU product
//   expert slots     what is left, in equal slots of the largest expert (gate + up + down),
//                    managed by VramExpertCache (lru or freq) keyed by (layer, expert)
//
// Every weight product of the session is offered to the tier (core/compute/matmul_offload.h):
//   - a resident matrix (looked up by host address range) is computed on the GPU, unless it is
//     so small that the CPU is done before a GPU round trip would be (VramCostModel::gpu_product);
//   - a routed expert (recognised through TrackedExpertSource while it is pinned): a VRAM hit is
//     computed on the GPU; on a miss VramCostModel decides, once per pin and using the token
//     count of the expert's first product, between copying the expert up and computing on the
//     GPU, or computing all three products on the CPU from the host arena. A copy-up enqueues
//     gate, up and down on a copy stream with an event each; the first product waits only for
//     its own matrix, so the rest of the copy overlaps with compute. When the RAM arena could be
//     page-locked (cudaHostRegister) the copies are asynchronous;
//   - anything else (types without CUDA kernels, matrices that did not fit, shapes the kernels
//     refuse before launching) goes to the CPU.
// Activations go up and results come down per product through preallocated page-locked
// staging; nothing is allocated per token.
//
// Numerics: CUDA products dot the weights against f32 activations (the CPU quantizes the
// activations) and sum in another order, so logits differ in the last bits and greedy tokens
// match the CPU run's (tests/test_gpu_tier.cpp), as llama.cpp's CUDA backend matches its CPU one.
//
// Builds without CUDA have the same interface: make_gpu_tier throws
// Error(unsupported, "--gpu: this sluice was built without CUDA ...").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/compute/matmul_offload.h"
#include "core/experts/tracked_expert_source.h"
#include "core/gpu/vram_cost_model.h"
#include "core/gpu/vram_plan.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

struct GpuTierOptions {
  uint64_t vram_bytes = 0;      // 0: free VRAM minus max(512 MiB, 5% of the device)
  std::string policy = "lru";   // VRAM expert cache policy: lru or freq
  TierRates rates;              // a rate > 0 overrides its measurement (tests, tuning)
};

struct GpuCounters {
  uint64_t products_gpu = 0, products_cpu = 0;  // weight products computed on each side
  uint64_t expert_hits = 0, expert_misses = 0;  // VRAM expert cache, per expert pin
  uint64_t experts_copied = 0, expert_copy_bytes = 0;
  uint64_t expert_cpu_fallbacks = 0;  // misses the cost model (or pinned-full slots) left to the CPU
  uint64_t upload_bytes = 0;          // every host -> device byte (weights and activations)
  uint64_t download_bytes = 0;
  GpuCounters operator-(const GpuCounters& b) const;
};

struct GpuPlan {
  std::string device;
  uint64_t vram_budget = 0;
  uint64_t workspace_bytes = 0;
  int64_t chunk_tokens = 0;
  uint64_t resident_bytes = 0;
  uint32_t resident_tensors = 0;
  uint32_t resident_on_cpu = 0;  // matrices that did not fit or have no CUDA kernels
  uint64_t resident_cpu_bytes = 0;
  uint64_t expert_slot_bytes = 0;
  uint32_t expert_slots = 0;
  uint64_t routed_experts = 0;   // (layer, expert) pairs in the model
  bool arena_page_locked = false;
  uint64_t host_staging_bytes = 0;    // page-locked staging outside the arena (in --budget)
  uint64_t gpu_rate_probe_bytes = 0;  // the VRAM matrix timed for rates.gpu_bytes_per_s (0: not measured)
  TierRates rates;
};

class GpuTier : public MatmulOffload, public ExpertReleaseListener {
 public:
  virtual const GpuPlan& plan() const = 0;
  virtual GpuCounters counters() const = 0;
  virtual uint64_t evictions() const = 0;
  // "VRAM 20.0 GiB on NVIDIA H200: workspace 64 MiB + resident 1.2 GiB (412 matrices) + 300 expert
  //  slots x 36 MiB (12% of routed experts)"
  std::string describe() const;
  // "gpu products 812 (CPU 40), VRAM expert hits 88.2% (..), copied up 12 (430 MiB), CPU fallbacks 3, ..."
  static std::string describe(const GpuCounters& c);
};

// Plans and fills VRAM for a model of this shape (core/gpu/gpu_model_shape.h; see above); the
// shape's resident tensors are copied up here and must stay in memory. `host_arena` is the RAM expert arena to
// page-lock (empty when experts are in core); `n_batch` the session's largest batch.
// Errors: Error(unsupported) without CUDA support in this build, Error(invalid_argument)
// "--gpu: no CUDA device found", Error(budget) when --vram exceeds the free VRAM or cannot hold
// the workspace.
std::unique_ptr<GpuTier> make_gpu_tier(const GpuModelShape& model, TrackedExpertSource& experts, kernels::ThreadPool& pool,
                                       int64_t n_batch, std::span<std::byte> host_arena,
                                       const GpuTierOptions& options);

// Page-locked host memory the tier allocates outside the RAM arena: two staging buffers, one for
// the activations going up and one for the results coming down, each `chunk_tokens` rows of the
// widest product dimension in f32 (at most 64 MiB each; bigger batches go in chunks). It counts
// against --budget (Engine::budget().gpu_staging) like the KV cache and scratch; the tier
// allocates exactly this. Shapes only: a planned model (Model::plan) gives the same answer as
// the loaded one.
struct GpuHostStaging {
  int64_t chunk_tokens = 0;   // tokens per product chunk: min(n_batch, 64 MiB / 4 / max_dim)
  int64_t max_dim = 0;        // widest input or output of any weight product
  uint64_t buffer_bytes = 0;  // one buffer: chunk_tokens * max_dim * 4
  uint64_t total() const { return 2 * buffer_bytes; }
};
GpuHostStaging plan_gpu_host_staging(const GpuModelShape& model, int64_t n_batch);

// Weight bytes per second of a one-token CPU product with `pool`: the best of three timed
// matvecs of the largest resident matrix up to 256 MiB (after one warm-up). The CPU side of
// VramCostModel; 0 when the model has no resident matrix.
double measure_cpu_matvec_rate(const GpuModelShape& model, kernels::ThreadPool& pool);

// Throws what make_gpu_tier would for a missing CUDA build or device, before anything is loaded.
void require_gpu();

// True when this build has the CUDA tier (whether or not a device is present).
bool gpu_tier_built();

}  // namespace sluice::core
