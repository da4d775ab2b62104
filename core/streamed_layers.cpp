#include "core/streamed_layers.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace sluice::core {

namespace {

// Units in forward order: blocks ascending, the output head (block n_layer) last.
std::map<int64_t, std::vector<const StreamedTensor*>> units_of(const Model& model) {
  std::map<int64_t, std::vector<const StreamedTensor*>> units;
  for (const StreamedTensor& t : model.streamed()) units[t.block].push_back(&t);
  return units;
}

}  // namespace

cache::ShardLayout build_layer_layout(const Model& model, const ShardIndex* index) {
  cache::ShardLayout layout;
  layout.n_expert = 1;
  layout.n_expert_used = 1;
  for (const auto& [block, tensors] : units_of(model)) {
    cache::LayerLayout unit;
    for (const StreamedTensor* t : tensors) {
      cache::TensorSlice ts{t->info->name, t->info->file_offset, t->info->n_bytes, t->info->n_bytes, {}};
      if (index) {
        const IndexedTensor* it = index->find(t->info->name);
        if (it && it->n_parts == 1) ts.digests = it->digests;
      }
      unit.tensors.push_back(std::move(ts));
    }
    layout.layers.push_back(std::move(unit));
  }
  if (layout.layers.empty()) throw Error(ErrorCode::invalid_argument, "the model has no layer tensors to stream");
  return layout;
}

StreamedLayers::StreamedLayers(const Model& model) : model_(model) {
  const int64_t n_layer = model.config().n_layer;
  unit_of_block_.assign(static_cast<size_t>(n_layer), -1);
  views_.reserve(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) views_.push_back(model.layer(il));
  output_view_ = model.output();
  for (const auto& [block, tensors] : units_of(model)) {
    const int64_t unit = n_units_++;
    if (block == n_layer) head_unit_ = unit;
    else unit_of_block_.at(static_cast<size_t>(block)) = unit;
    std::vector<Member> members;
    for (size_t i = 0; i < tensors.size(); ++i) members.push_back({tensors[i]->member, i});
    members_.push_back(std::move(members));
  }
  pins_.resize(static_cast<size_t>(n_units_));
}

cache::ShardCache& StreamedLayers::cache() const {
  if (!cache_) throw Error(ErrorCode::internal, "StreamedLayers used before a cache was attached");
  return *cache_;
}

const cache::ShardCache::Pin& StreamedLayers::pin(int64_t unit) {
  cache::ShardCache& c = cache();
  cache::ShardCache::Pin& p = pins_[static_cast<size_t>(unit)];
  if (!p) p = c.acquire({static_cast<uint32_t>(unit), 0});
  // The order is fixed: read the next unit while this one computes (a no-op without a free or
  // evictable slot in its class).
  c.prefetch({static_cast<uint32_t>((unit + 1) % n_units_), 0});
  c.wait(p);
  return p;
}

const LayerWeights& StreamedLayers::acquire(int64_t block) {
  LayerWeights& view = views_.at(static_cast<size_t>(block));
  const int64_t unit = unit_of_block_[static_cast<size_t>(block)];
  if (unit < 0) return view;
  const cache::ShardCache::Pin& p = pin(unit);
  for (const Member& m : members_[static_cast<size_t>(unit)]) (view.*m.field).data = p.tensor(m.tensor).data();
  return view;
}

void StreamedLayers::release(int64_t block) {
  const int64_t unit = unit_of_block_.at(static_cast<size_t>(block));
  if (unit < 0) return;
  LayerWeights& view = views_[static_cast<size_t>(block)];
  for (const Member& m : members_[static_cast<size_t>(unit)]) (view.*m.field).data = nullptr;
  pins_[static_cast<size_t>(unit)].release();
}

const Tensor& StreamedLayers::acquire_output() {
  if (head_unit_ < 0) return output_view_;
  output_view_.data = pin(head_unit_).tensor(0).data();
  return output_view_;
}

void StreamedLayers::release_output() {
  if (head_unit_ < 0) return;
  output_view_.data = nullptr;
  pins_[static_cast<size_t>(head_unit_)].release();
}

}  // namespace sluice::core
