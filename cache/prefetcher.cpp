#include "cache/prefetcher.h"

#include <algorithm>

namespace sluice::cache {

void PredictionCounters::add(const PredictionCounters& o) {
  steps += o.steps;
  predicted += o.predicted;
  actual += o.actual;
  correct += o.correct;
  issued += o.issued;
  issued_bytes += o.issued_bytes;
  wasted += o.wasted;
  wasted_bytes += o.wasted_bytes;
  previous_steps += o.previous_steps;
  previous_actual += o.previous_actual;
  previous_correct += o.previous_correct;
}

Prefetcher::Prefetcher(ShardCache& cache) : cache_(&cache), n_expert_(cache.layout().n_expert) {
  const ShardLayout& layout = cache.layout();
  const size_t n_layer = layout.n_layer();
  for (const LayerLayout& l : layout.layers) {
    uint64_t bytes = 0;
    for (const TensorSlice& t : l.tensors) bytes += t.expert_bytes;
    shard_bytes_.push_back(bytes);
  }
  flags_.assign(layout.n_shards(), 0);
  previous_.assign(layout.n_shards(), 0);
  any_predicted_.assign(n_layer, 0);
  has_previous_.assign(n_layer, 0);
  counters_.resize(n_layer);
}

uint8_t& Prefetcher::flag(uint32_t layer, int32_t expert) {
  if (layer >= counters_.size() || expert < 0 || static_cast<uint32_t>(expert) >= n_expert_) {
    throw Error(ErrorCode::internal, "prefetcher: no expert " + std::to_string(expert) + " in layer " +
                                         std::to_string(layer));
  }
  return flags_[shard_index({layer, static_cast<uint32_t>(expert)}, n_expert_)];
}

size_t Prefetcher::predict(uint32_t layer, std::span<const int32_t> experts) {
  size_t started = 0;
  for (const int32_t e : experts) {
    uint8_t& f = flag(layer, e);
    f |= kPredicted;
    if (f & kIssued) continue;
    if (cache_->prefetch({layer, static_cast<uint32_t>(e)})) {
      f |= kIssued;
      ++started;
      ++counters_[layer].issued;
      counters_[layer].issued_bytes += shard_bytes_[layer];
    }
  }
  if (!experts.empty()) any_predicted_[layer] = 1;
  return started;
}

void Prefetcher::observe(uint32_t layer, std::span<const int32_t> experts) {
  (void)flag(layer, 0);  // validates the layer
  PredictionCounters& c = counters_[layer];
  uint8_t* f = flags_.data() + static_cast<size_t>(layer) * n_expert_;
  uint8_t* prev = previous_.data() + static_cast<size_t>(layer) * n_expert_;
  // Mark the routed experts (bit 4) without allocating, then count against predictions.
  constexpr uint8_t kRouted = 4;
  uint64_t n_actual = 0;
  for (const int32_t e : experts) {
    uint8_t& x = flag(layer, e);
    if (!(x & kRouted)) ++n_actual, x |= kRouted;
  }
  if (any_predicted_[layer]) {
    ++c.steps;
    c.actual += n_actual;
    for (uint32_t e = 0; e < n_expert_; ++e) {
      if (f[e] & kPredicted) ++c.predicted;
      if ((f[e] & kPredicted) && (f[e] & kRouted)) ++c.correct;
      if ((f[e] & kIssued) && !(f[e] & kRouted)) ++c.wasted, c.wasted_bytes += shard_bytes_[layer];
    }
  }
  if (has_previous_[layer]) {
    ++c.previous_steps;
    c.previous_actual += n_actual;
    for (uint32_t e = 0; e < n_expert_; ++e) c.previous_correct += (prev[e] && (f[e] & kRouted)) ? 1 : 0;
  }
  for (uint32_t e = 0; e < n_expert_; ++e) {
    prev[e] = (f[e] & kRouted) ? 1 : 0;
    f[e] = 0;
  }
  has_previous_[layer] = 1;
  any_predicted_[layer] = 0;
}

PredictionStats Prefetcher::stats() const {
  PredictionStats s;
  s.layers = counters_;
  for (const auto& c : counters_) s.total.add(c);
  return s;
}

}  // namespace sluice::cache
