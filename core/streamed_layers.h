// Non-routed weights streamed block by block through a budgeted cache, for budgets that cannot
// hold them all.
//
// build_layer_layout() turns Model::streamed() (a Model loaded with stream_layer_tensors) into a
// cache::ShardLayout with one shard per unit: unit b < n_layer is block b (every tensor of the
// block used as stored: attention, norms, router, shared experts, dense FFN), and the last unit
// is the output head when it is not tied to the embeddings. Each unit is cache layer `unit`,
// expert 0 (n_expert = n_expert_used = 1); units of equal size share a size class, so the
// arena's minimum is one slot per distinct unit size.
//
// StreamedLayers implements LayerSource on a cache::ShardCache of its own (own reader, own
// arena): acquire(b) pins unit b, starts a speculative read of the unit that comes next in the
// known order (b + 1, then the head, then block 0 of the next step), waits for b and returns a
// LayerWeights whose streamed tensors point into the slot (the rest point into the Model). The
// bytes are the file's, exactly those an in-core load copies, so logits are bit-identical.
// The next unit is read while this one computes when its size class has a second slot.
#pragma once

#include <vector>

#include "cache/shard_cache.h"
#include "cache/shard_layout.h"
#include "core/layer_source.h"
#include "core/model.h"
#include "core/shard_index.h"

namespace sluice::core {

// Error(invalid_argument) when the model streams nothing. With an index, every tensor carries
// its XXH3-64 digest and the cache verifies it on landing.
cache::ShardLayout build_layer_layout(const Model& model, const ShardIndex* index = nullptr);

class StreamedLayers final : public LayerSource {
 public:
  explicit StreamedLayers(const Model& model);
  // The cache is created after the session (its budget depends on the session's scratch).
  void attach(cache::ShardCache& cache) { cache_ = &cache; }

  const LayerWeights& acquire(int64_t block) override;
  void release(int64_t block) override;
  const Tensor& acquire_output() override;
  void release_output() override;

 private:
  struct Member {
    Tensor LayerWeights::*field = nullptr;  // null: the output head
    size_t tensor = 0;                       // index among the unit's tensors in the slot
  };
  // Pins unit `unit`, starts reading the next one, waits for it.
  const cache::ShardCache::Pin& pin(int64_t unit);
  cache::ShardCache& cache() const;

  const Model& model_;
  int64_t n_units_ = 0;
  std::vector<int64_t> unit_of_block_;       // -1: nothing of the block streams
  std::vector<std::vector<Member>> members_;  // per unit
  std::vector<LayerWeights> views_;           // per block: the Model's tensors, streamed data filled in
  Tensor output_view_;
  int64_t head_unit_ = -1;
  std::vector<cache::ShardCache::Pin> pins_;  // per unit
  cache::ShardCache* cache_ = nullptr;
};

}  // namespace sluice::core
