// TrackedExpertSource: an ExpertSource decorator that remembers which routed expert each pinned
// weight view belongs to.
//
// Session::matmul only sees a WeightMatrix (a host pointer and a shape). A compute tier that
// caches experts by (layer, expert) needs to know, for such a pointer, which expert it is; the
// inner source's host memory is reused (the RAM arena recycles slots), so a pointer identifies
// an expert only while that expert is pinned. This decorator records the three views returned by
// acquire() until the matching release(), and answers find(ptr) for them.
//
// Before the inner release, the listener (if any) hears on_release(layer, expert): a tier that
// started an asynchronous copy out of the pinned host bytes must finish it there, because the
// inner source may overwrite them as soon as they are released.
//
// Pins are kept in a small table sized to n_expert at construction (the forward pass pins one
// expert at a time today; the protocol allows several): no allocation per acquire.
#pragma once

#include <cstdint>
#include <vector>

#include "core/experts/expert_source.h"

namespace sluice::core {

class ExpertReleaseListener {
 public:
  virtual ~ExpertReleaseListener() = default;
  virtual void on_release(int layer, int expert) = 0;
};

struct PinnedExpertPart {
  int layer = 0;
  int expert = 0;
  int part = 0;  // 0 gate, 1 up, 2 down
  const ExpertWeights* weights = nullptr;  // all three views of the expert (valid while pinned)
};

class TrackedExpertSource final : public ExpertSource {
 public:
  TrackedExpertSource(ExpertSource& inner, int n_expert);

  void set_listener(ExpertReleaseListener* listener) { listener_ = listener; }
  void plan(int layer, std::span<const int32_t> experts) override { inner_.plan(layer, experts); }
  ExpertWeights acquire(int layer, int expert) override;
  // The inner source picks (completion order); the pick is tracked like an acquire.
  int32_t acquire_any(int layer, std::span<const int32_t> remaining, ExpertWeights& out) override;
  void release(int layer, int expert) override;
  void prefetch(int layer, std::span<const int32_t> experts) override { inner_.prefetch(layer, experts); }
  void cached(int layer, std::span<uint8_t> out) const override { inner_.cached(layer, out); }

  // The pinned expert whose gate, up or down view starts at `data`; false when none does.
  bool find(const std::byte* data, PinnedExpertPart& out) const;
  size_t pinned() const { return n_pinned_; }

 private:
  struct Entry {
    int layer = -1, expert = -1;
    int count = 0;  // acquires minus releases of this (layer, expert)
    ExpertWeights weights;
  };
  void track(int layer, int expert, const ExpertWeights& w);  // releases and throws when full
  ExpertSource& inner_;
  ExpertReleaseListener* listener_ = nullptr;
  std::vector<Entry> entries_;  // fixed size; count == 0 marks a free entry
  size_t n_pinned_ = 0;
};

}  // namespace sluice::core
