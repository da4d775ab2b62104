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
// A shard whose read failed (io_error) or whose bytes did not match the index (corrupt_data) is
// dropped and read once more (through acquire or acquire_any); a second failure is thrown with
// the cache's message (tensor, expert, file offset), so corrupt bytes are never computed on.
// The views have the same bytes as the in-core tensors, so logits are bit-identical.
#pragma once

#include <memory>
#include <vector>

#include "cache/prefetcher.h"
#include "cache/shard_cache.h"
#include "cache/shard_layout.h"
#include "core/experts/expert_source.h"
#include "core/gguf/gguf.h"
#include "core/gguf/shard_index.h"

namespace sluice::core {

struct StreamedLayout {
  cache::ShardLayout layout;
  std::vector<int> block_of_moe_layer;  // cache layer -> transformer block
  std::vector<int> moe_layer_of_block;  // transformer block -> cache layer, -1 for dense blocks
};

// What the layout needs of an architecture's config (core::ModelConfig, core::KimiK3Config):
// the same routed-expert tensors (blk.N.ffn_{gate,up,down}_exps) whatever the architecture.
struct ExpertGeometry {
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  std::vector<bool> moe_layer;  // per block
  template <class Config>
  static ExpertGeometry of(const Config& c) {
    ExpertGeometry g{c.n_layer, c.n_expert, c.n_expert_used, {}};
    for (int64_t il = 0; il < c.n_layer; ++il) g.moe_layer.push_back(c.is_moe_layer(il));
    return g;
  }
};

// Throws Error(invalid_file) when an MoE block lacks one of its expert tensors. With an index,
// every expert slice carries its XXH3-64 digest and the cache verifies it on landing.
StreamedLayout build_shard_layout(const GgufFile& file, const ExpertGeometry& geometry,
                                  const ShardIndex* index = nullptr);

class CachedExpertSource final : public ExpertSource {
 public:
  CachedExpertSource(const GgufFile& file, const ExpertGeometry& geometry, StreamedLayout layout);
  // The cache is created after the session (its budget depends on the session's scratch).
  void attach(cache::ShardCache& cache);

  void plan(int layer, std::span<const int32_t> experts) override;
  ExpertWeights acquire(int layer, int expert) override;
  int32_t acquire_any(int layer, std::span<const int32_t> remaining, ExpertWeights& out) override;
  void release(int layer, int expert) override;
  void prefetch(int layer, std::span<const int32_t> experts) override;
  void read_ahead(int layer, std::span<const int32_t> experts) override;
  void cached(int layer, std::span<uint8_t> out) const override;

  const StreamedLayout& layout() const { return layout_; }
  uint64_t rereads() const { return rereads_; }
  const cache::Prefetcher* prefetcher() const { return prefetcher_.get(); }

 private:
  struct ExpertShape {
    kernels::WeightMatrix gate, up, down;  // data filled per acquire
  };
  cache::ShardCache& cache() const;
  uint64_t slots_of(int moe_layer) const;  // usable slots of the layer's size class (not lent)
  static cache::ShardKey key(int moe_layer, int expert);
  void release_all();
  size_t pin_for(int layer, int expert);  // index into planned_experts_
  ExpertWeights weights_of(int layer, size_t index);  // waits, moves the pin to held_
  void wait_or_reread(cache::ShardCache::Pin& pin);   // one re-read after io_error/corrupt_data

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
  // A read-ahead waiting for this layer's last demand pin (read_ahead): its cache layer, experts.
  int ahead_layer_ = -1;
  std::vector<int32_t> ahead_;
  std::vector<int32_t> order_;  // plan(): the planned experts, resident ones first
  void start_read_ahead();  // hands ahead_ to the prefetcher once every planned expert is pinned
  uint64_t rereads_ = 0;
};

}  // namespace sluice::core
