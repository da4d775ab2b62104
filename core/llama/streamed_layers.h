// Non-routed weights streamed block by block through a budgeted cache, for budgets that cannot
// hold them all.
//
// build_layer_plan() turns Model::streamed() (a Model loaded with stream_layer_tensors) into a
// cache::ShardLayout with one shard per unit: unit u < n_units - 1 is a block (every tensor of the
// block used as stored: attention, norms, router, shared experts, dense FFN), and the last unit
// is the output head when it is not tied to the embeddings. Each unit is cache layer `u`,
// expert 0 (n_expert = n_expert_used = 1). Every unit's slot is sized for the largest unit
// (LayerLayout::slot_bytes_floor), so all share one size class and the arena's minimum is one
// slot: what one layer's weights need.
//
// A unit's tensors are merged into runs: tensors that follow each other in the file (gaps of at
// most kRunGap bytes, the GGUF alignment padding) are one extent, so a block is a few reads and a
// slot carries one placement pad per run rather than per tensor. Each tensor is placed by
// (run, offset in run). Digests of the index are per tensor, so they are checked by
// verify_unit() (the cache's verify hook) rather than per extent.
//
// StreamedLayers implements LayerSource on a cache::ShardCache of its own (own reader, own
// arena): acquire(b) pins b's unit, starts a speculative read of the unit that comes next in the
// known order (b + 1, then the head, then block 0 of the next step), waits for b and returns a
// LayerWeights whose streamed tensors point into the slot (the rest point into the Model). The
// bytes are the file's, exactly those an in-core load copies, so logits are bit-identical.
// The next unit is read while this one computes when its size class has a second slot.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "cache/shard_cache.h"
#include "cache/shard_layout.h"
#include "core/llama/layer_source.h"
#include "core/llama/model.h"
#include "core/gguf/shard_index.h"

namespace sluice::core {

struct LayerPlan {
  struct Placement {
    Tensor LayerWeights::*field = nullptr;  // null: the output head
    const GgufTensorInfo* info = nullptr;
    uint32_t run = 0;                        // index among the unit's extents (TensorSlices)
    uint64_t offset = 0;                     // bytes into the run
    std::optional<uint64_t> digest;          // XXH3-64 of the tensor, from the index
  };
  static constexpr uint64_t kRunGap = 4096;
  cache::ShardLayout layout;
  std::vector<int64_t> block_of_unit;  // n_layer for the output head
  std::vector<std::vector<Placement>> units;
};

// Error(invalid_argument) when the model streams nothing.
LayerPlan build_layer_plan(const Model& model, const ShardIndex* index = nullptr);

// Checks every tensor of a landed unit against its digest; Error(corrupt_data) naming the tensor.
// `slot` is the unit's slot, `alignment` the cache's (cache::usable_alignment of its reader).
void verify_unit(const LayerPlan& plan, cache::ShardKey key, std::span<const std::byte> slot, uint32_t alignment);

class StreamedLayers final : public LayerSource {
 public:
  StreamedLayers(const Model& model, LayerPlan plan);
  // The cache is created after the session (its budget depends on the session's scratch).
  void attach(cache::ShardCache& cache) { cache_ = &cache; }
  const LayerPlan& plan() const { return plan_; }

  const LayerWeights& acquire(int64_t block) override;
  void release(int64_t block) override;
  const Tensor& acquire_output() override;
  void release_output() override;

 private:
  // Pins unit `unit`, starts reading the next one, waits for it.
  const cache::ShardCache::Pin& pin(int64_t unit);
  cache::ShardCache& cache() const;

  LayerPlan plan_;
  int64_t n_units_ = 0;
  std::vector<int64_t> unit_of_block_;        // -1: nothing of the block streams
  std::vector<LayerWeights> views_;           // per block: the Model's tensors, streamed data filled in
  Tensor output_view_;
  int64_t head_unit_ = -1;
  std::vector<cache::ShardCache::Pin> pins_;  // per unit
  cache::ShardCache* cache_ = nullptr;
};

}  // namespace sluice::core
