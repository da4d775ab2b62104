#include "core/llama/streamed_layers.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace sluice::core {

LayerPlan build_layer_plan(const Model& model, const ShardIndex* index) {
  // Units in forward order: blocks ascending, the output head (block n_layer) last.
  std::map<int64_t, std::vector<const StreamedTensor*>> by_block;
  for (const StreamedTensor& t : model.streamed()) by_block[t.block].push_back(&t);
  LayerPlan plan;
  plan.layout.n_expert = 1;
  plan.layout.n_expert_used = 1;
  for (auto& [block, tensors] : by_block) {
    std::sort(tensors.begin(), tensors.end(),
              [](const StreamedTensor* a, const StreamedTensor* b) { return a->info->file_offset < b->info->file_offset; });
    cache::LayerLayout unit;
    std::vector<LayerPlan::Placement> placements;
    for (const StreamedTensor* t : tensors) {
      const GgufTensorInfo& info = *t->info;
      cache::TensorSlice* run = unit.tensors.empty() ? nullptr : &unit.tensors.back();
      const uint64_t run_end = run ? run->file_offset + run->expert_bytes : 0;
      if (!run || info.file_offset < run_end || info.file_offset - run_end > LayerPlan::kRunGap) {
        unit.tensors.push_back({info.name, info.file_offset, 0, 0, {}});
        run = &unit.tensors.back();
      }
      run->expert_bytes = info.file_offset + info.n_bytes - run->file_offset;
      run->expert_stride = run->expert_bytes;
      LayerPlan::Placement p{t->member, &info, static_cast<uint32_t>(unit.tensors.size() - 1),
                             info.file_offset - run->file_offset, std::nullopt};
      if (index) {
        const IndexedTensor* it = index->find(info.name);
        if (it && it->n_parts == 1 && it->digests.size() == 1) p.digest = it->digests[0];
      }
      placements.push_back(p);
    }
    plan.layout.layers.push_back(std::move(unit));
    plan.block_of_unit.push_back(block);
    plan.units.push_back(std::move(placements));
  }
  if (plan.units.empty()) throw Error(ErrorCode::invalid_argument, "the model has no layer tensors to stream");
  // One size class for all units, sized for the largest at the largest alignment: blocks are
  // visited in turn, so the minimum is one slot rather than one per distinct unit size.
  uint64_t floor = 0;
  for (uint32_t u = 0; u < plan.layout.n_layer(); ++u)
    floor = std::max(floor, cache::slot_bytes(plan.layout, u, static_cast<uint32_t>(cache::kSlotAlignment)));
  for (auto& unit : plan.layout.layers) unit.slot_bytes_floor = floor;
  return plan;
}

void verify_unit(const LayerPlan& plan, cache::ShardKey key, std::span<const std::byte> slot, uint32_t alignment) {
  for (const LayerPlan::Placement& p : plan.units.at(key.layer)) {
    if (!p.digest) continue;
    const cache::ShardExtent run = cache::shard_extent(plan.layout, key, p.run, alignment);
    const std::span<const std::byte> bytes = slot.subspan(run.slot_offset + p.offset, p.info->n_bytes);
    if (cache::extent_digest(bytes) != *p.digest) {
      throw Error(ErrorCode::corrupt_data, "tensor '" + p.info->name + "' at file offset " +
                                               std::to_string(p.info->file_offset) +
                                               " does not match its digest in the index (file changed or bytes "
                                               "corrupted in flight)");
    }
  }
}

StreamedLayers::StreamedLayers(const Model& model, LayerPlan plan) : plan_(std::move(plan)) {
  const int64_t n_layer = model.config().n_layer;
  unit_of_block_.assign(static_cast<size_t>(n_layer), -1);
  views_.reserve(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) views_.push_back(model.layer(il));
  output_view_ = model.output();
  n_units_ = static_cast<int64_t>(plan_.units.size());
  for (int64_t u = 0; u < n_units_; ++u) {
    const int64_t block = plan_.block_of_unit[static_cast<size_t>(u)];
    if (block == n_layer) head_unit_ = u;
    else unit_of_block_.at(static_cast<size_t>(block)) = u;
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
  for (const LayerPlan::Placement& m : plan_.units[static_cast<size_t>(unit)])
    (view.*m.field).data = p.tensor(m.run).data() + m.offset;
  return view;
}

void StreamedLayers::release(int64_t block) {
  const int64_t unit = unit_of_block_.at(static_cast<size_t>(block));
  if (unit < 0) return;
  LayerWeights& view = views_[static_cast<size_t>(block)];
  for (const LayerPlan::Placement& m : plan_.units[static_cast<size_t>(unit)]) (view.*m.field).data = nullptr;
  pins_[static_cast<size_t>(unit)].release();
}

const Tensor& StreamedLayers::acquire_output() {
  if (head_unit_ < 0) return output_view_;
  const LayerPlan::Placement& m = plan_.units[static_cast<size_t>(head_unit_)].front();
  output_view_.data = pin(head_unit_).tensor(m.run).data() + m.offset;
  return output_view_;
}

void StreamedLayers::release_output() {
  if (head_unit_ < 0) return;
  output_view_.data = nullptr;
  pins_[static_cast<size_t>(head_unit_)].release();
}

}  // namespace sluice::core
