// Engine: a model ready to run inside a memory budget.
//
// It opens the file (io_uring with O_DIRECT where possible, pread otherwise), loads everything
// that is not a routed expert into RAM, builds the session (KV cache, activations, scratch), and
// streams routed experts through a ShardCache whose arena gets whatever the budget leaves:
//
//   budget = resident weights + KV cache + session scratch + expert arena (+ nothing else)
//
// Budget modes:
//   budget_bytes > 0          a hard ceiling; below the minimum -> Error(budget) stating it
//   cache_experts in (0, 1]   the ceiling is sized so the expert arena holds that fraction of
//                             all routed expert bytes (at least one layer's working set)
//   neither                   unlimited: the arena can hold every expert (nothing is evicted)
//   in_core                   the reference path: experts loaded into RAM with the rest, no cache
// Every mode gives bit-identical logits: the same bytes reach the same kernels.
//
// With `gpu`, the session's weight products are offered to a GpuTier (VRAM, its own budget
// `gpu_options.vram_bytes`, not counted in budget_bytes); the routed experts reach the session
// through a TrackedExpertSource so the tier knows which expert a pinned view is. GPU runs give
// the CPU run's greedy tokens, not its bit-identical logits.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/shard_cache.h"
#include "cache/warm_start.h"
#include "core/expert_source.h"
#include "core/gpu_tier.h"
#include "core/model.h"
#include "core/session.h"
#include "core/streamed_experts.h"
#include "core/tracked_expert_source.h"
#include "io/fault_reader.h"
#include "io/open_reader.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

struct EngineOptions {
  std::string model_path;
  uint64_t budget_bytes = 0;
  double cache_experts = 0;  // fraction of routed expert bytes; 0 = not used
  bool in_core = false;
  bool widen_f16_to_f32 = false;
  unsigned threads = 1;
  SessionOptions session;
  io::IoOptions io;
  std::string policy = "lru";
  // Verify every landed shard against the model's shard index (sluice index) when one exists.
  bool verify = true;
  cache::PolicyOptions policy_options;
  // --gpu: a VRAM tier above the RAM cache (core/gpu_tier.h); VRAM is not part of budget_bytes.
  bool gpu = false;
  GpuTierOptions gpu_options;
  // Warm start (cache/warm_start.h): a profile file (`--profile-out`, `sluice tune
  // --profile-out`). Loaded and checked against the model here; it also becomes the policy's
  // profile when policy_options has none (hot-pin then pins its hottest shards). The preload
  // itself runs in warm_up(), so the caller can show progress.
  std::string warm_profile;
  // Debugging and tests (--io-faults): shard reads go through an io::FaultInjectingReader. The
  // model's resident tensors and header load through the plain reader; only streamed expert
  // shards, the data the checksums and the re-read guard, see the faults.
  std::optional<io::FaultOptions> faults;
};

struct BudgetSplit {
  uint64_t resident_weights = 0;  // non-routed tensors in RAM (all tensors when in-core)
  uint64_t kv_cache = 0;
  uint64_t scratch = 0;           // activations, router and matmul scratch
  uint64_t expert_arena = 0;      // the shard cache's arena
  uint64_t expert_min = 0;        // the arena's minimum: one MoE layer's working set
  uint64_t routed_expert_bytes = 0;  // all routed experts in the file
  uint64_t budget = 0;            // the ceiling in force (0: unlimited)
  uint64_t total() const { return resident_weights + kv_cache + scratch + expert_arena; }
  uint64_t minimum() const { return resident_weights + kv_cache + scratch + expert_min; }
};

class Engine {
 public:
  explicit Engine(const EngineOptions& options);
  ~Engine();

  Session& session() { return *session_; }
  // One forward pass; tells the cache a new step began (policies age, stats count tokens).
  std::span<const float> forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits = true) {
    if (cache_) cache_->begin_token();
    return session_->forward(tokens, start_pos, all_logits);
  }
  const Model& model() const { return *model_; }
  io::Reader& reader() { return *reader_; }  // the one shards are read through
  // What --io-faults injected so far; nullopt without it.
  std::optional<io::FaultCounts> fault_counts() const;
  // Shards read a second time after a failed or corrupt landing (CachedExpertSource).
  uint64_t shard_rereads() const;
  cache::ShardCache* cache() { return cache_.get(); }  // null when in-core
  GpuTier* gpu() { return gpu_.get(); }                 // null without --gpu
  kernels::ThreadPool& pool() { return *pool_; }
  const BudgetSplit& budget() const { return split_; }
  // Preloads the warm profile's most-used experts up to the arena's capacity (nothing when no
  // profile was given or experts are in core). Call before the first token.
  cache::WarmResult warm_up(const std::function<void(uint64_t, uint64_t)>& progress = {});
  bool has_warm_profile() const { return !warm_keys_.empty(); }
  const std::vector<std::string>& notices() const { return notices_; }
  bool verifying() const { return verifying_; }
  // With --io-faults: "io faults injected: ...; corrupt extents detected N, shards re-read N";
  // empty otherwise. Names are stable (tests parse them).
  std::string describe_faults() const;
  // "budget 1.0 GiB = resident 412 MiB + KV 8 MiB + scratch 3 MiB + expert cache 601 MiB"
  std::string describe_budget() const;

 private:
  void attach_gpu();

  EngineOptions options_;
  std::vector<std::string> notices_;
  std::unique_ptr<io::Reader> reader_;
  io::Reader* plain_reader_ = nullptr;              // reader_, or the one inside faulty_
  io::FaultInjectingReader* faulty_ = nullptr;      // reader_ when --io-faults is set
  std::unique_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  cache::ExpertProfile warm_profile_;  // outlives cache_: the policy may point at it
  std::vector<cache::ShardKey> warm_keys_;
  std::unique_ptr<ExpertSource> experts_;
  CachedExpertSource* streamed_ = nullptr;  // experts_ when streaming
  std::unique_ptr<TrackedExpertSource> tracked_;  // over experts_ with --gpu
  std::unique_ptr<Session> session_;
  std::unique_ptr<cache::ShardCache> cache_;
  std::unique_ptr<GpuTier> gpu_;
  BudgetSplit split_;
  bool verifying_ = false;
};

}  // namespace sluice::core
