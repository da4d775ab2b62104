#include "core/layers/streamed_layers.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace sluice::core {

LayerPlan build_layer_plan(std::span<const LayerTensorRef> tensors, const ShardIndex* index) {
  // Units in forward order: blocks ascending, the output head (block n_layer) last.
  std::map<int64_t, std::vector<uint32_t>> by_block;
  for (uint32_t i = 0; i < tensors.size(); ++i) by_block[tensors[i].block].push_back(i);
  LayerPlan plan;
  plan.layout.n_expert = 1;
  plan.layout.n_expert_used = 1;
  for (auto& [block, ids] : by_block) {
    std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
      return tensors[a].info->file_offset < tensors[b].info->file_offset;
    });
    cache::LayerLayout unit;
    std::vector<LayerPlan::Placement> placements;
    for (uint32_t id : ids) {
      const GgufTensorInfo& info = *tensors[id].info;
      cache::TensorSlice* run = unit.tensors.empty() ? nullptr : &unit.tensors.back();
      const uint64_t run_end = run ? run->file_offset + run->expert_bytes : 0;
      if (!run || info.file_offset < run_end || info.file_offset - run_end > LayerPlan::kRunGap) {
        unit.tensors.push_back({info.name, info.file_offset, 0, 0, {}});
        run = &unit.tensors.back();
      }
      run->expert_bytes = info.file_offset + info.n_bytes - run->file_offset;
      run->expert_stride = run->expert_bytes;
      LayerPlan::Placement p{id, &info, static_cast<uint32_t>(unit.tensors.size() - 1),
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

UnitStream::UnitStream(LayerPlan plan, int64_t n_layer, std::vector<Tensor*> views)
    : plan_(std::move(plan)), views_(std::move(views)) {
  unit_of_block_.assign(static_cast<size_t>(n_layer), -1);
  n_units_ = static_cast<int64_t>(plan_.units.size());
  for (int64_t u = 0; u < n_units_; ++u) {
    const int64_t block = plan_.block_of_unit[static_cast<size_t>(u)];
    if (block == n_layer) head_unit_ = u;
    else unit_of_block_.at(static_cast<size_t>(block)) = u;
  }
  for (const auto& unit : plan_.units)
    for (const LayerPlan::Placement& p : unit)
      if (p.tensor >= views_.size() || !views_[p.tensor])
        throw Error(ErrorCode::internal, "layer plan tensor '" + p.info->name + "' has no view to bind");
  pins_.resize(static_cast<size_t>(n_units_));
}

cache::ShardCache& UnitStream::cache() const {
  if (!cache_) throw Error(ErrorCode::internal, "a layer stream was used before a cache was attached");
  return *cache_;
}

void UnitStream::acquire_unit(int64_t unit) {
  if (unit < 0) return;
  cache::ShardCache& c = cache();
  cache::ShardCache::Pin& p = pins_[static_cast<size_t>(unit)];
  if (!p) p = c.acquire({static_cast<uint32_t>(unit), 0});
  // The order is fixed: read the next unit while this one computes (a no-op without a free or
  // evictable slot in its class).
  c.prefetch({static_cast<uint32_t>((unit + 1) % n_units_), 0});
  c.wait(p);
  for (const LayerPlan::Placement& m : plan_.units[static_cast<size_t>(unit)])
    views_[m.tensor]->data = p.tensor(m.run).data() + m.offset;
}

void UnitStream::release_unit(int64_t unit) {
  if (unit < 0) return;
  // Null views: a use after release fails loudly instead of reading an evicted slot.
  for (const LayerPlan::Placement& m : plan_.units[static_cast<size_t>(unit)]) views_[m.tensor]->data = nullptr;
  pins_[static_cast<size_t>(unit)].release();
}

}  // namespace sluice::core
