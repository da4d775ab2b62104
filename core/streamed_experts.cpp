#include "core/streamed_experts.h"

#include <algorithm>

#include "common/error.h"

namespace sluice::core {

namespace {

const char* const kExpertTensors[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

std::string expert_tensor_name(int block, int part) {
  return "blk." + std::to_string(block) + "." + kExpertTensors[part] + ".weight";
}

}  // namespace

StreamedLayout build_shard_layout(const GgufFile& file, const ExpertGeometry& config, const ShardIndex* index) {
  StreamedLayout s;
  s.layout.n_expert = static_cast<uint32_t>(config.n_expert);
  s.layout.n_expert_used = static_cast<uint32_t>(config.n_expert_used);
  s.moe_layer_of_block.assign(static_cast<size_t>(config.n_layer), -1);
  for (int64_t il = 0; il < config.n_layer; ++il) {
    if (!config.moe_layer[static_cast<size_t>(il)]) continue;
    cache::LayerLayout layer;
    for (int part = 0; part < 3; ++part) {
      const GgufTensorInfo& t = file.tensor(expert_tensor_name(static_cast<int>(il), part));
      if (t.n_dims != 3 || t.ne[2] != config.n_expert) {
        throw Error(ErrorCode::invalid_file, "tensor '" + t.name + "' has " + std::to_string(t.ne[2]) +
                                                 " experts, expected " + std::to_string(config.n_expert));
      }
      uint64_t slice = t.n_bytes / static_cast<uint64_t>(t.ne[2]);
      cache::TensorSlice ts{t.name, t.file_offset, slice, slice, {}};
      if (index) {
        const IndexedTensor* it = index->find(t.name);
        if (it && it->n_parts == static_cast<uint32_t>(t.ne[2])) ts.digests = it->digests;
      }
      layer.tensors.push_back(std::move(ts));
    }
    s.moe_layer_of_block[static_cast<size_t>(il)] = static_cast<int>(s.layout.layers.size());
    s.block_of_moe_layer.push_back(static_cast<int>(il));
    s.layout.layers.push_back(std::move(layer));
  }
  if (s.layout.layers.empty()) {
    throw Error(ErrorCode::invalid_argument, "the model has no routed experts to stream");
  }
  return s;
}

CachedExpertSource::CachedExpertSource(const GgufFile& file, const ExpertGeometry& config, StreamedLayout layout)
    : layout_(std::move(layout)), shapes_(static_cast<size_t>(config.n_layer)) {
  for (int block : layout_.block_of_moe_layer) {
    ExpertShape& shape = shapes_[static_cast<size_t>(block)];
    kernels::WeightMatrix* parts[] = {&shape.gate, &shape.up, &shape.down};
    for (int part = 0; part < 3; ++part) {
      const GgufTensorInfo& t = file.tensor(expert_tensor_name(block, part));
      parts[part]->type = t.type;
      parts[part]->n_cols = t.ne[0];
      parts[part]->n_rows = t.ne[1];
      parts[part]->row_stride = t.row_bytes;
      parts[part]->repack =
          kernels::ggml_repacks(t.type, t.ne[1]) ? kernels::GgmlRepack::mul_mat_id : kernels::GgmlRepack::none;
    }
  }
  planned_experts_.reserve(static_cast<size_t>(config.n_expert));
  pins_.resize(static_cast<size_t>(config.n_expert));
  keys_.reserve(static_cast<size_t>(config.n_expert));
}

cache::ShardCache& CachedExpertSource::cache() const {
  if (!cache_) throw Error(ErrorCode::internal, "CachedExpertSource used before a cache was attached");
  return *cache_;
}

void CachedExpertSource::plan(int layer, std::span<const int32_t> experts) {
  int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  // Drop pins of an earlier step that were not released (they would block eviction).
  release_all();
  planned_experts_.assign(experts.begin(), experts.end());
  planned_layer_ = layer;
  // A prefill batch can route to more experts than the layer's size class has slots: pin the
  // first `window` now (hits stay, misses start reading) and the rest as earlier ones are
  // released, so pins never exceed the slots and reads stay in flight ahead of compute.
  const cache::CachePlan& plan = cache().plan();
  uint64_t window = plan.classes[plan.class_of_layer[static_cast<size_t>(moe)]].n_slots;
  size_t first = std::min<size_t>(experts.size(), static_cast<size_t>(window));
  keys_.clear();
  for (size_t i = 0; i < first; ++i) keys_.push_back(key(moe, experts[i]));
  cache().acquire_all(keys_, std::span(pins_.data(), first));
  next_to_pin_ = first;
}

void CachedExpertSource::release_all() {
  for (auto& pin : pins_) pin.release();
}

cache::ShardKey CachedExpertSource::key(int moe_layer, int expert) {
  return cache::ShardKey{static_cast<uint32_t>(moe_layer), static_cast<uint32_t>(expert)};
}

cache::ShardCache::Pin& CachedExpertSource::pin_for(int layer, int expert) {
  int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  if (layer != planned_layer_) {
    // Not planned: the protocol makes plan() a hint, so acquire alone.
    release_all();
    planned_experts_.clear();
    planned_layer_ = layer;
    next_to_pin_ = 0;
  }
  auto it = std::find(planned_experts_.begin(), planned_experts_.end(), expert);
  if (it == planned_experts_.end()) {
    planned_experts_.push_back(expert);
    it = planned_experts_.end() - 1;
    next_to_pin_ = std::max(next_to_pin_, planned_experts_.size());
  }
  auto& pin = pins_[static_cast<size_t>(it - planned_experts_.begin())];
  if (!pin) pin = cache().acquire(key(moe, expert));
  return pin;
}

ExpertWeights CachedExpertSource::acquire(int layer, int expert) {
  cache::ShardCache::Pin& pin = pin_for(layer, expert);
  try {
    cache().wait(pin);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::io_error && e.code() != ErrorCode::corrupt_data) throw;
    // Releasing the last pin drops the failed shard from the table, so acquire reads it anew.
    const cache::ShardKey k = pin.key();
    pin.release();
    ++rereads_;
    pin = cache().acquire(k);
    try {
      cache().wait(pin);
    } catch (const Error& again) {
      pin.release();
      throw Error(again.code(), std::string(again.what()) + " (failed again after one re-read)");
    }
  }
  const ExpertShape& shape = shapes_[static_cast<size_t>(layer)];
  ExpertWeights w{shape.gate, shape.up, shape.down};
  w.gate.data = pin.tensor(0).data();
  w.up.data = pin.tensor(1).data();
  w.down.data = pin.tensor(2).data();
  return w;
}

void CachedExpertSource::release(int layer, int expert) {
  if (layer != planned_layer_) return;
  auto it = std::find(planned_experts_.begin(), planned_experts_.end(), expert);
  if (it == planned_experts_.end()) return;
  pins_[static_cast<size_t>(it - planned_experts_.begin())].release();
  // A slot is free again: start the next planned expert that is not pinned yet.
  int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  while (next_to_pin_ < planned_experts_.size() && pins_[next_to_pin_]) ++next_to_pin_;
  if (next_to_pin_ < planned_experts_.size()) {
    pins_[next_to_pin_] = cache().acquire(key(moe, planned_experts_[next_to_pin_]));
    ++next_to_pin_;
  }
}

}  // namespace sluice::core
