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
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cache/shard_cache.h"
#include "core/expert_source.h"
#include "core/model.h"
#include "core/session.h"
#include "core/streamed_experts.h"
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
  // Several sequences in one pass (continuous batching): one step for the cache.
  std::span<const float> forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                       std::span<const int64_t> positions, std::span<const uint8_t> want_logits) {
    if (cache_) cache_->begin_token();
    return session_->forward_batch(tokens, seqs, positions, want_logits);
  }
  const Model& model() const { return *model_; }
  io::Reader& reader() { return *reader_; }
  cache::ShardCache* cache() { return cache_.get(); }  // null when in-core
  kernels::ThreadPool& pool() { return *pool_; }
  const BudgetSplit& budget() const { return split_; }
  const std::vector<std::string>& notices() const { return notices_; }
  bool verifying() const { return verifying_; }
  // "budget 1.0 GiB = resident 412 MiB + KV 8 MiB + scratch 3 MiB + expert cache 601 MiB"
  std::string describe_budget() const;

 private:
  EngineOptions options_;
  std::vector<std::string> notices_;
  std::unique_ptr<io::Reader> reader_;
  std::unique_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ExpertSource> experts_;
  CachedExpertSource* streamed_ = nullptr;  // experts_ when streaming
  std::unique_ptr<Session> session_;
  std::unique_ptr<cache::ShardCache> cache_;
  BudgetSplit split_;
  bool verifying_ = false;
};

}  // namespace sluice::core
