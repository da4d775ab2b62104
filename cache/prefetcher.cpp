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
  ahead_issued += o.ahead_issued;
  ahead_issued_bytes += o.ahead_issued_bytes;
  ahead_wasted += o.ahead_wasted;
  ahead_wasted_bytes += o.ahead_wasted_bytes;
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
  queue_.reserve(layout.n_shards());
}

uint8_t& Prefetcher::flag(uint32_t layer, int32_t expert) {
  if (layer >= counters_.size() || expert < 0 || static_cast<uint32_t>(expert) >= n_expert_) {
    throw Error(ErrorCode::internal, "prefetcher: no expert " + std::to_string(expert) + " in layer " +
                                         std::to_string(layer));
  }
  return flags_[shard_index({layer, static_cast<uint32_t>(expert)}, n_expert_)];
}

void Prefetcher::enqueue(uint32_t layer, std::span<const int32_t> experts, uint8_t marks, uint8_t queued_marks) {
  for (const int32_t e : experts) {
    uint8_t& f = flag(layer, e);
    f |= marks;
    if (f & (kIssued | kQueued)) continue;
    f |= kQueued | queued_marks;
    queue_.push_back({layer, static_cast<uint32_t>(e)});
  }
}

size_t Prefetcher::predict(uint32_t layer, std::span<const int32_t> experts) {
  enqueue(layer, experts, kPredicted, 0);
  if (!experts.empty()) any_predicted_[layer] = 1;
  return pump();
}

size_t Prefetcher::read_ahead(uint32_t layer, std::span<const int32_t> experts) {
  enqueue(layer, experts, 0, kAhead);  // kAhead only on the entries it queues: no prediction marks
  return pump();
}

size_t Prefetcher::pump() {
  if (queue_.empty() || cache_->demand_reads_in_flight() > 0) return 0;
  size_t started = 0, kept = 0, i = 0;
  for (; i < queue_.size(); ++i) {
    const ShardKey k = queue_[i];
    uint8_t& f = flags_[shard_index(k, n_expert_)];
    if (!(f & kQueued)) continue;  // its layer already routed: the prediction is moot
    if (cache_->is_resident(k)) {
      f &= static_cast<uint8_t>(~kQueued);
      continue;
    }
    const bool ahead = f & kAhead;
    // Caps reached (or no evictable slot): keep the rest queued, in order.
    if (!(ahead ? cache_->read_ahead(k) : cache_->prefetch(k))) break;
    f = static_cast<uint8_t>((f & ~kQueued) | kIssued);
    ++started;
    PredictionCounters& c = counters_[k.layer];
    ++(ahead ? c.ahead_issued : c.issued);
    (ahead ? c.ahead_issued_bytes : c.issued_bytes) += shard_bytes_[k.layer];
  }
  for (; i < queue_.size(); ++i) queue_[kept++] = queue_[i];
  queue_.resize(kept);
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
      if ((f[e] & kIssued) && !(f[e] & kAhead) && !(f[e] & kRouted)) ++c.wasted, c.wasted_bytes += shard_bytes_[layer];
    }
  }
  for (uint32_t e = 0; e < n_expert_; ++e) {
    if ((f[e] & kIssued) && (f[e] & kAhead) && !(f[e] & kRouted)) ++c.ahead_wasted, c.ahead_wasted_bytes += shard_bytes_[layer];
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
  // The layer has routed: its queued predictions are moot.
  size_t kept = 0;
  for (const ShardKey& k : queue_) {
    if (k.layer != layer) queue_[kept++] = k;
  }
  queue_.resize(kept);
}

PredictionStats Prefetcher::stats() const {
  PredictionStats s;
  s.layers = counters_;
  for (const auto& c : counters_) s.total.add(c);
  return s;
}

}  // namespace sluice::cache
