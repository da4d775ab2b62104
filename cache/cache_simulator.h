// Trace-driven cache simulation: replays routing traces through an EvictionPolicy at a given
// capacity, exactly as ShardCache would serve the forward pass, and counts hits and misses.
//
// Model of one decode step at one layer (the K experts the router chose):
//   1. every chosen shard already resident is pinned (so this step's misses cannot evict it);
//   2. the shards are then touched in router order: a resident one is a hit, a missing one is
//      loaded, evicting unpinned shards chosen by the policy while the cache is full;
//   3. all K are released after the layer's compute.
// The cache is one pool of `capacity_slots` equal slots shared by all layers (traces carry no
// shard sizes; `sluice tune` multiplies by a shard size for bytes). It must hold at least K.
//
// Each sequence is an independent request and starts from a cold cache. evaluate_policy scores
// anything learned from a trace leave-one-sequence-out: the profile used for sequence s is built
// from the other sequences only; Belady sees the future of sequence s (it is the bound).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/eviction_policy.h"
#include "cache/trace.h"

namespace sluice::cache {

struct SimLayerStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  double hit_rate() const { return hits + misses ? static_cast<double>(hits) / (hits + misses) : 0.0; }
};

struct SimResult {
  std::string policy;
  uint64_t capacity_slots = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t tokens = 0;
  std::vector<SimLayerStats> layers;

  double hit_rate() const { return hits + misses ? static_cast<double>(hits) / (hits + misses) : 0.0; }
  double misses_per_token() const { return tokens ? static_cast<double>(misses) / tokens : 0.0; }
  void add(const SimResult& other);
};

// Replays sequence `seq` through `policy` (reset first: cold cache).
// Throws Error(budget) when capacity_slots < topk, stating the minimum.
SimResult simulate_sequence(const Trace& trace, size_t seq, EvictionPolicy& policy, uint64_t capacity_slots);

// All sequences, leave-one-sequence-out (see above); `options.profile`/`future` are filled in here.
SimResult evaluate_policy(const Trace& trace, std::string_view policy, uint64_t capacity_slots,
                          PolicyOptions options = {});

}  // namespace sluice::cache
