// Warm start: preload the experts a profile says are used most, before the first token, so
// decode runs at steady-state speed from the start instead of paying every cold miss.
//
// A profile is the text file trace.h describes (format_profile / parse_profile); `sluice tune
// --profile-out` writes one from a trace, `sluice run|bench --profile-out` from the routing of
// that run. Only its use counts matter here: shards are ranked by count over all layers
// together (ties: lower layer, then lower expert, so the order is deterministic), and loaded in
// that order into free slots until every size class is full. Nothing is evicted; a shard whose
// class is full is skipped and later, smaller-class shards may still fit. The reads go through
// ShardCache::preload (the normal read path: digests verified on landing), up to kInFlight at once,
// lowest-ranked first so that recency-based policies keep the hottest shards longest.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "cache/eviction_policy.h"
#include "cache/shard_cache.h"

namespace sluice::cache {

// Shards by descending use count; shards never used are left out.
std::vector<ShardKey> rank_by_use(const ExpertProfile& profile);

// Error(invalid_argument) naming `name` when the profile's layer or expert count differs from
// the model's (a profile recorded on another model).
void check_profile_matches(const ExpertProfile& profile, uint32_t n_layer, uint32_t n_expert, std::string_view name);

struct WarmResult {
  uint64_t shards = 0;  // shards loaded
  uint64_t bytes = 0;   // bytes read for them
  double seconds = 0;
};

// progress(bytes_done, bytes_total) after each landed shard; bytes_total is an estimate made
// before loading (the shards that fit, in rank order).
WarmResult warm_start(ShardCache& cache, std::span<const ShardKey> ranked,
                      const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace sluice::cache
