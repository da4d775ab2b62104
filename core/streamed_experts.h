// Routed experts streamed from disk through the budgeted shard cache.
//
// build_shard_layout() describes, from the GGUF tensor directory, where each expert of each MoE
// layer lies (its slices of ffn_gate_exps, ffn_up_exps and ffn_down_exps). Cache layers are MoE
// layers numbered densely from 0; `block_of_moe_layer` maps them back to transformer blocks.
//
// CachedExpertSource implements the ExpertSource protocol on a cache::ShardCache:
//   plan(layer, experts)  pins the step's experts (as many at once as the layer's slots allow;
//                         the rest as earlier ones are released): hits stay, misses are read,
//   acquire(layer, e)     waits until e has landed and returns views into its slot,
//   acquire_any(layer, r) the pinned planned expert that landed first (hits first, then misses
//                         in completion order: cache wait_any),
//   release(layer, e)     unpins it (it stays cached until the policy evicts it),
//   prefetch(layer, es)   hands predictions to a cache::Prefetcher (speculative reads, capped);
//                         plan() tells it what the layer really routed to, for its statistics.
// The views have the same bytes as the in-core tensors, so logits are bit-identical.
#pragma once

#include <memory>
#include <vector>

#include "cache/prefetcher.h"
#include "cache/shard_cache.h"
#include "cache/shard_layout.h"
#include "core/expert_source.h"
#include "core/model.h"
#include "core/shard_index.h"

namespace sluice::core {

struct StreamedLayout {
  cache::ShardLayout layout;
  std::vector<int> block_of_moe_layer;  // cache layer -> transformer block
  std::vector<int> moe_layer_of_block;  // transformer block -> cache layer, -1 for dense blocks
};

// Throws Error(invalid_file) when an MoE block lacks one of its expert tensors. With an index,
// every expert slice carries its XXH3-64 digest and the cache verifies it on landing.
StreamedLayout build_shard_layout(const GgufFile& file, const ModelConfig& config,
                                  const ShardIndex* index = nullptr);

class CachedExpertSource final : public ExpertSource {
 public:
  CachedExpertSource(const GgufFile& file, const ModelConfig& config, StreamedLayout layout);
  // The cache is created after the session (its budget depends on the session's scratch).
  void attach(cache::ShardCache& cache);

  void plan(int layer, std::span<const int32_t> experts) override;
  ExpertWeights acquire(int layer, int expert) override;
  int32_t acquire_any(int layer, std::span<const int32_t> remaining, ExpertWeights& out) override;
  void release(int layer, int expert) override;
  void prefetch(int layer, std::span<const int32_t> experts) override;

  const StreamedLayout& layout() const { return layout_; }
  const cache::Prefetcher* prefetcher() const { return prefetcher_.get(); }

 private:
  struct ExpertShape {
    kernels::WeightMatrix gate, up, down;  // data filled per acquire
  };
  cache::ShardCache& cache() const;
  static cache::ShardKey key(int moe_layer, int expert);
  void release_all();
  size_t pin_for(int layer, int expert);  // index into planned_experts_
  ExpertWeights weights_of(int layer, size_t index);  // waits, moves the pin to held_

  StreamedLayout layout_;
  std::vector<ExpertShape> shapes_;  // per transformer block
  cache::ShardCache* cache_ = nullptr;
  int planned_layer_ = -1;
  std::vector<int32_t> planned_experts_;
  std::vector<cache::ShardCache::Pin> pins_;  // n_expert slots; [i] pins planned_experts_[i]
  std::vector<cache::ShardCache::Pin> held_;  // [i]: planned_experts_[i] handed out, not released
  std::unique_ptr<cache::Prefetcher> prefetcher_;
  std::vector<cache::ShardKey> keys_;
  size_t next_to_pin_ = 0;  // planned experts before this index have been pinned
};

}  // namespace sluice::core
