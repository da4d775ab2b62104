// Non-routed weights streamed block by block through a budgeted cache, for budgets that cannot
// hold them all. One mechanism for every architecture: what differs is only the per-block struct
// of tensor views (`Weights`: llama's LayerWeights, kimi-k3's KimiK3Layer) and which of its
// fields a model left out of its load.
//
// An architecture's model, loaded with stream_layer_tensors, lists the tensors it left out as
// StreamedTensorOf<Weights> (block, field, file info); it keeps every other tensor (token
// embeddings, output_norm, tensors converted at load) resident. From that list:
//
// build_layer_plan() makes a cache::ShardLayout with one shard per unit: unit u < n_units - 1 is
// a block (every listed tensor of the block), and the last unit is the output head when it is
// listed (block n_layer, no field). Each unit is cache layer `u`, expert 0 (n_expert =
// n_expert_used = 1). Every unit's slot is sized for the largest unit
// (LayerLayout::slot_bytes_floor), so all share one size class and the arena's minimum is one
// slot: what one layer's weights need.
//
// A unit's tensors are merged into runs: tensors that follow each other in the file (gaps of at
// most kRunGap bytes, the GGUF alignment padding) are one extent, so a block is a few reads and a
// slot carries one placement pad per run rather than per tensor. Each tensor is placed by
// (run, offset in run). Digests of the index are per tensor, so they are checked by
// verify_unit() (the cache's verify hook) rather than per extent.
//
// UnitStream (not a template) is the cache side and the model's LayerStream (core/arch/
// architecture.h): acquire_block(b) pins b's unit, starts a speculative read of the unit that
// comes next in the known order (b + 1, then the head, then block 0 of the next step), waits for
// b and points each streamed view's data into the slot; release_block(b) nulls them and unpins.
// StreamedLayers<Weights> is the session's LayerSource: it owns the views (one Weights per block,
// a copy of the model's, and the head) that UnitStream fills in. The bytes are the file's,
// exactly those an in-core load copies, so logits are bit-identical. The next unit is read while
// this one computes when its size class has a second slot.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cache/shard_cache.h"
#include "cache/shard_layout.h"
#include "core/arch/architecture.h"
#include "core/gguf/shard_index.h"
#include "core/gguf/tensor.h"
#include "core/layers/layer_source.h"

namespace sluice::core {

// The same without the field: what the plan needs.
struct LayerTensorRef {
  int64_t block = 0;
  const GgufTensorInfo* info = nullptr;
};

struct LayerPlan {
  struct Placement {
    uint32_t tensor = 0;                     // index into the list the plan was built from
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

// Error(invalid_argument) when `tensors` is empty (the model streams nothing).
LayerPlan build_layer_plan(std::span<const LayerTensorRef> tensors, const ShardIndex* index = nullptr);

template <class Weights>
LayerPlan build_layer_plan(std::span<const StreamedTensorOf<Weights>> tensors, const ShardIndex* index = nullptr) {
  std::vector<LayerTensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& t : tensors) refs.push_back({t.block, t.info});
  return build_layer_plan(std::span<const LayerTensorRef>(refs), index);
}

// Checks every tensor of a landed unit against its digest; Error(corrupt_data) naming the tensor.
// `slot` is the unit's slot, `alignment` the cache's (cache::usable_alignment of its reader).
void verify_unit(const LayerPlan& plan, cache::ShardKey key, std::span<const std::byte> slot, uint32_t alignment);

class UnitStream final : public LayerStream {
 public:
  // `views[i]`: where tensor i of the plan's list is bound (it must outlive the stream).
  UnitStream(LayerPlan plan, int64_t n_layer, std::vector<Tensor*> views);
  const LayerPlan& plan() const { return plan_; }

  const cache::ShardLayout& layout() const override { return plan_.layout; }
  void attach(cache::ShardCache& cache) override { cache_ = &cache; }
  void verify(cache::ShardKey key, std::span<const std::byte> slot, uint32_t alignment) const override {
    verify_unit(plan_, key, slot, alignment);
  }

  // Binds block `block`'s streamed views (nothing when none of its tensors streams).
  void acquire_block(int64_t block) { acquire_unit(unit_of_block_.at(static_cast<size_t>(block))); }
  void release_block(int64_t block) { release_unit(unit_of_block_.at(static_cast<size_t>(block))); }
  void acquire_head() { acquire_unit(head_unit_); }
  void release_head() { release_unit(head_unit_); }

 private:
  void acquire_unit(int64_t unit);
  void release_unit(int64_t unit);
  cache::ShardCache& cache() const;

  LayerPlan plan_;
  int64_t n_units_ = 0;
  std::vector<int64_t> unit_of_block_;        // -1: nothing of the block streams
  int64_t head_unit_ = -1;
  std::vector<Tensor*> views_;                // per tensor of the plan's list
  std::vector<cache::ShardCache::Pin> pins_;  // per unit
  cache::ShardCache* cache_ = nullptr;
};

// The session's LayerSource over a UnitStream. Not movable: the stream points into its views.
template <class Weights>
class StreamedLayers final : public LayerSource<Weights> {
 public:
  // `layers` and `output`: the model's (streamed tensors with data == nullptr); `tensors`: the
  // model's streamed list.
  StreamedLayers(std::span<const Weights> layers, const Tensor& output,
                 std::span<const StreamedTensorOf<Weights>> tensors, const ShardIndex* index)
      : views_(layers.begin(), layers.end()), output_view_(output),
        stream_(build_layer_plan(tensors, index), static_cast<int64_t>(layers.size()), bind(tensors)) {}
  StreamedLayers(const StreamedLayers&) = delete;
  StreamedLayers& operator=(const StreamedLayers&) = delete;

  UnitStream& stream() { return stream_; }
  const Weights& acquire(int64_t block) override {
    stream_.acquire_block(block);
    return views_[static_cast<size_t>(block)];
  }
  void release(int64_t block) override { stream_.release_block(block); }
  const Tensor& acquire_output() override {
    stream_.acquire_head();
    return output_view_;
  }
  void release_output() override { stream_.release_head(); }

 private:
  std::vector<Tensor*> bind(std::span<const StreamedTensorOf<Weights>> tensors) {
    std::vector<Tensor*> v;
    v.reserve(tensors.size());
    for (const auto& t : tensors)
      v.push_back(t.member ? &(views_.at(static_cast<size_t>(t.block)).*t.member) : &output_view_);
    return v;
  }

  std::vector<Weights> views_;  // per block: the model's tensors, streamed data filled in
  Tensor output_view_;
  UnitStream stream_;           // last: it points into views_ and output_view_
};

}  // namespace sluice::core
