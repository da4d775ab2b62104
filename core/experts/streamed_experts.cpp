#include "core/experts/streamed_experts.h"

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
  held_.resize(static_cast<size_t>(config.n_expert));
  keys_.reserve(static_cast<size_t>(config.n_expert));
  ahead_.reserve(static_cast<size_t>(config.n_expert));
  order_.reserve(static_cast<size_t>(config.n_expert));
}

void CachedExpertSource::attach(cache::ShardCache& cache) {
  cache_ = &cache;
  prefetcher_ = std::make_unique<cache::Prefetcher>(cache);
}

void CachedExpertSource::prefetch(int layer, std::span<const int32_t> experts) {
  int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  if (prefetcher_ && moe >= 0) prefetcher_->predict(static_cast<uint32_t>(moe), experts);
}

void CachedExpertSource::read_ahead(int layer, std::span<const int32_t> experts) {
  int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  if (!prefetcher_ || moe < 0) return;
  // Only where the next layer will stream (more experts than its class has slots): otherwise its
  // experts fit the cache, and a wrong guess would only evict what the cache keeps.
  if (experts.size() <= slots_of(moe)) return;
  ahead_layer_ = moe;
  ahead_.assign(experts.begin(), experts.end());
  start_read_ahead();
}

void CachedExpertSource::start_read_ahead() {
  // Before this layer's last expert is pinned, a read-ahead would take the slots it still needs.
  if (ahead_.empty() || next_to_pin_ < planned_experts_.size()) return;
  prefetcher_->read_ahead(static_cast<uint32_t>(ahead_layer_), ahead_);
  ahead_.clear();
}

uint64_t CachedExpertSource::slots_of(int moe_layer) const {
  // Not the plan's count: while a prompt batch runs, some slots are lent to its scratch.
  return cache().usable_slots(cache().plan().class_of_layer[static_cast<size_t>(moe_layer)]);
}

cache::ShardCache& CachedExpertSource::cache() const {
  if (!cache_) throw Error(ErrorCode::internal, "CachedExpertSource used before a cache was attached");
  return *cache_;
}

void CachedExpertSource::cached(int layer, std::span<uint8_t> out) const {
  const int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  for (size_t e = 0; e < out.size(); ++e) out[e] = moe >= 0 && cache().is_resident(key(moe, static_cast<int>(e))) ? 1 : 0;
}

void CachedExpertSource::plan(int layer, std::span<const int32_t> experts) {
  int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  // Drop pins of an earlier step that were not released (they would block eviction).
  release_all();
  if (prefetcher_) prefetcher_->observe(static_cast<uint32_t>(moe), experts);
  planned_experts_.assign(experts.begin(), experts.end());
  planned_layer_ = layer;
  if (ahead_layer_ == moe) ahead_.clear();  // a read-ahead of this layer not started in time is moot
  // A prefill batch can route to more experts than the layer's size class has slots: pin the
  // first slots_of(moe) now (hits stay, misses start reading) and the rest as earlier ones are
  // released, so pins never exceed the slots and reads stay in flight ahead of compute.
  size_t first = std::min<size_t>(experts.size(), static_cast<size_t>(slots_of(moe)));
  if (first < experts.size()) {
    // Resident (or still landing, e.g. read ahead) experts first: pinning them now keeps them;
    // left for later, the window's misses would evict them.
    // One residency check per expert (a failed read could change the answer between two).
    order_.resize(experts.size());
    size_t front = 0, back = experts.size();
    for (const int32_t e : experts) (cache().is_resident(key(moe, e)) ? order_[front++] : order_[--back]) = e;
    std::reverse(order_.begin() + static_cast<std::ptrdiff_t>(back), order_.end());  // misses ascending
    planned_experts_.assign(order_.begin(), order_.end());
  }
  keys_.clear();
  for (size_t i = 0; i < first; ++i) keys_.push_back(key(moe, planned_experts_[i]));
  cache().acquire_all(keys_, std::span(pins_.data(), first));
  next_to_pin_ = first;
}

void CachedExpertSource::release_all() {
  for (auto& pin : pins_) pin.release();
  for (auto& pin : held_) pin.release();
}

cache::ShardKey CachedExpertSource::key(int moe_layer, int expert) {
  return cache::ShardKey{static_cast<uint32_t>(moe_layer), static_cast<uint32_t>(expert)};
}

size_t CachedExpertSource::pin_for(int layer, int expert) {
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
  const size_t i = static_cast<size_t>(it - planned_experts_.begin());
  if (!pins_[i] && !held_[i]) pins_[i] = cache().acquire(key(moe, expert));
  return i;
}

void CachedExpertSource::wait_or_reread(cache::ShardCache::Pin& pin) {
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
}

ExpertWeights CachedExpertSource::weights_of(int layer, size_t i) {
  if (pins_[i]) {
    wait_or_reread(pins_[i]);
    held_[i] = std::move(pins_[i]);
  }
  // Speculative reads wait for the demand reads; this one has landed, maybe the last of them.
  if (prefetcher_) prefetcher_->pump();
  const ExpertShape& shape = shapes_[static_cast<size_t>(layer)];
  ExpertWeights w{shape.gate, shape.up, shape.down};
  w.gate.data = held_[i].tensor(0).data();
  w.up.data = held_[i].tensor(1).data();
  w.down.data = held_[i].tensor(2).data();
  return w;
}

ExpertWeights CachedExpertSource::acquire(int layer, int expert) { return weights_of(layer, pin_for(layer, expert)); }

int32_t CachedExpertSource::acquire_any(int layer, std::span<const int32_t> remaining, ExpertWeights& out) {
  if (remaining.empty()) throw Error(ErrorCode::internal, "acquire_any: no expert left to acquire");
  // Every pinned, not yet handed out planned expert is one of `remaining` in the forward pass's
  // use; anything else (an unplanned call) falls back to the first remaining expert.
  bool any = layer == planned_layer_ &&
             std::any_of(pins_.begin(), pins_.begin() + static_cast<std::ptrdiff_t>(planned_experts_.size()),
                         [](const cache::ShardCache::Pin& p) { return static_cast<bool>(p); });
  if (any) {
    const std::span<const cache::ShardCache::Pin> pinned(pins_.data(), planned_experts_.size());
    size_t i = 0;
    try {
      i = cache().wait_any(pinned);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::io_error && e.code() != ErrorCode::corrupt_data) throw;
      // wait_any names no pin: hand out the failed one, which weights_of reads once more.
      auto failed = std::find_if(pinned.begin(), pinned.end(), [&](const auto& p) { return cache().failed(p); });
      if (failed == pinned.end()) throw;
      i = static_cast<size_t>(failed - pinned.begin());
    }
    const int32_t e = planned_experts_[i];
    if (std::find(remaining.begin(), remaining.end(), e) != remaining.end()) {
      out = weights_of(layer, i);
      return e;
    }
  }
  out = acquire(layer, remaining.front());
  return remaining.front();
}

void CachedExpertSource::release(int layer, int expert) {
  if (layer != planned_layer_) return;
  auto it = std::find(planned_experts_.begin(), planned_experts_.end(), expert);
  if (it == planned_experts_.end()) return;
  const size_t i = static_cast<size_t>(it - planned_experts_.begin());
  held_[i].release();
  pins_[i].release();
  // A slot is free again: start the next planned expert that is not pinned yet.
  int moe = layout_.moe_layer_of_block.at(static_cast<size_t>(layer));
  while (next_to_pin_ < planned_experts_.size() && (pins_[next_to_pin_] || held_[next_to_pin_])) ++next_to_pin_;
  if (next_to_pin_ < planned_experts_.size()) {
    pins_[next_to_pin_] = cache().acquire(key(moe, planned_experts_[next_to_pin_]));
    ++next_to_pin_;
  }
  if (prefetcher_) {
    start_read_ahead();
    prefetcher_->pump();  // the freed slot may take a read-ahead
  }
}

}  // namespace sluice::core
