#include "core/experts/tracked_expert_source.h"

#include <algorithm>

#include "common/error.h"

namespace sluice::core {

TrackedExpertSource::TrackedExpertSource(ExpertSource& inner, int n_expert)
    : inner_(inner), entries_(static_cast<size_t>(std::max(n_expert, 1))) {}

ExpertWeights TrackedExpertSource::acquire(int layer, int expert) {
  ExpertWeights w = inner_.acquire(layer, expert);
  track(layer, expert, w);
  return w;
}

int32_t TrackedExpertSource::acquire_any(int layer, std::span<const int32_t> remaining, ExpertWeights& out) {
  const int32_t expert = inner_.acquire_any(layer, remaining, out);
  track(layer, expert, out);
  return expert;
}

void TrackedExpertSource::track(int layer, int expert, const ExpertWeights& w) {
  Entry* free_entry = nullptr;
  for (Entry& e : entries_) {
    if (e.count > 0 && e.layer == layer && e.expert == expert) {
      ++e.count;  // pinned twice: the same bytes, one entry
      return;
    }
    if (e.count == 0 && !free_entry) free_entry = &e;
  }
  if (!free_entry) {
    inner_.release(layer, expert);
    throw Error(ErrorCode::internal, "more than " + std::to_string(entries_.size()) + " experts pinned at once");
  }
  *free_entry = Entry{layer, expert, 1, w};
  ++n_pinned_;
}

void TrackedExpertSource::release(int layer, int expert) {
  for (Entry& e : entries_) {
    if (e.count == 0 || e.layer != layer || e.expert != expert) continue;
    if (--e.count == 0) {
      --n_pinned_;
      // The tier finishes copies out of these bytes before the inner source may reuse them.
      if (listener_) listener_->on_release(layer, expert);
    }
    break;
  }
  inner_.release(layer, expert);
}

bool TrackedExpertSource::find(const std::byte* data, PinnedExpertPart& out) const {
  if (n_pinned_ == 0 || !data) return false;
  for (const Entry& e : entries_) {
    if (e.count == 0) continue;
    const kernels::WeightMatrix* parts[] = {&e.weights.gate, &e.weights.up, &e.weights.down};
    for (int p = 0; p < 3; ++p) {
      if (parts[p]->data != data) continue;
      out = {e.layer, e.expert, p, &e.weights};
      return true;
    }
  }
  return false;
}

}  // namespace sluice::core
