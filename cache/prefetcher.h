// Prefetcher: turns expert predictions into speculative cache reads, and keeps score.
//
// The forward pass predicts, before a MoE layer routes, which experts it will pick (core/
// expert_predictor.h: the layer's router applied to an earlier hidden state). Per step:
//
//   prefetcher.predict(layer, experts);   // 0..n times per layer, before the layer routes:
//                                         // queues the predicted experts and pumps
//   prefetcher.pump();                    // when no demand read is in flight, starts queued
//                                         // predictions not resident, in order, until the
//                                         // cache's speculative caps (requests, bytes) refuse
//   prefetcher.read_ahead(layer, experts); // a large batch's guess of its next layer's experts,
//                                         // likely first: queued like a prediction, but started
//                                         // with ShardCache::read_ahead (no speculative caps)
//   prefetcher.observe(layer, routed);    // the experts the layer actually routed to: closes
//                                         // the layer's predictions for the step into the stats
//
// Demand reads go first: speculative reads only start while the disk has no demand read
// outstanding (measured on the synthetic Kimi K2: issuing them alongside demand reads slowed
// decode, the disk being shared). The expert source pumps after each expert it hands out.
// Predictions of one layer within a step are a union (depth 2 predicts layer L from L-1 and L-2).
// Bookkeeping per layer (PredictionCounters), over steps where the layer had a prediction:
//   recall     = correct / actual     share of routed experts that were predicted
//   precision  = correct / predicted  share of predicted experts that were routed
//   wasted     speculative reads issued for experts the layer did not route to in that step
//              (they stay cached, and may hit later, but the read was not needed then)
// Read-aheads are scored apart (ahead_*: issued and wasted), so that a prefill batch's guesses,
// which cover most of a layer, do not blur the per-token recall and precision above;
// and, to measure the cross-token signal rather than assume it, the same recall for "the layer's
// experts of the previous step" as a predictor (previous_recall), over every observed step.
//
// Layers are cache layers (MoE layers numbered densely from 0), as in ShardKey. Not thread-safe:
// one forward pass drives it. No allocation after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/shard_cache.h"

namespace sluice::cache {

struct PredictionCounters {
  uint64_t steps = 0;         // steps in which the layer routed after a prediction
  uint64_t predicted = 0;     // distinct predicted experts, summed over those steps
  uint64_t actual = 0;        // distinct routed experts, summed over those steps
  uint64_t correct = 0;       // predicted and routed
  uint64_t issued = 0;        // speculative reads started
  uint64_t issued_bytes = 0;
  uint64_t wasted = 0;        // of those, for experts not routed in that step
  uint64_t wasted_bytes = 0;
  uint64_t previous_steps = 0, previous_actual = 0, previous_correct = 0;  // cross-token signal
  uint64_t ahead_issued = 0, ahead_issued_bytes = 0;  // read-aheads started
  uint64_t ahead_wasted = 0, ahead_wasted_bytes = 0;  // of those, for experts the layer did not route to
  void add(const PredictionCounters& o);
  double recall() const { return actual ? static_cast<double>(correct) / static_cast<double>(actual) : 0.0; }
  double precision() const { return predicted ? static_cast<double>(correct) / static_cast<double>(predicted) : 0.0; }
  double previous_recall() const {
    return previous_actual ? static_cast<double>(previous_correct) / static_cast<double>(previous_actual) : 0.0;
  }
};

struct PredictionStats {
  std::vector<PredictionCounters> layers;
  PredictionCounters total;
};

class Prefetcher {
 public:
  explicit Prefetcher(ShardCache& cache);

  // Return how many reads they started. Experts outside [0, n_expert) throw Error(internal).
  size_t predict(uint32_t layer, std::span<const int32_t> experts);
  size_t read_ahead(uint32_t layer, std::span<const int32_t> experts);
  size_t pump();
  size_t queued() const { return queue_.size(); }
  void observe(uint32_t layer, std::span<const int32_t> experts);
  PredictionStats stats() const;

 private:
  enum : uint8_t { kPredicted = 1, kIssued = 2, kQueued = 8, kAhead = 16 };  // 4: routed (observe)
  uint8_t& flag(uint32_t layer, int32_t expert);
  // Marks every expert with `marks`, and queues those neither issued nor queued, adding `queued_marks`.
  void enqueue(uint32_t layer, std::span<const int32_t> experts, uint8_t marks, uint8_t queued_marks);

  ShardCache* cache_;
  uint32_t n_expert_;
  std::vector<uint64_t> shard_bytes_;    // per layer
  std::vector<uint8_t> flags_;           // [layer][expert]: kPredicted | kIssued, this step
  std::vector<uint8_t> any_predicted_;   // per layer, this step
  std::vector<uint8_t> previous_;        // [layer][expert]: routed in the layer's previous step
  std::vector<uint8_t> has_previous_;    // per layer
  std::vector<PredictionCounters> counters_;
  std::vector<ShardKey> queue_;  // predicted, not issued yet; capacity n_shards (no reallocation)
};

}  // namespace sluice::cache
