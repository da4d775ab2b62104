// Cache-aware routing (opt-in: run/bench/serve/chat/perplexity --route cache-aware[=J[,M]]).
//
// Exact routing takes the top k experts of the selection scores. Cache-aware routing keeps the
// true top J and fills the other k - J slots with experts whose weights are already in RAM (in
// the expert cache, or being read), the best first among the top M ranks; where fewer than k - J
// of those ranks are cached, the true next ranks fill the rest. The mixing weights are the
// chosen experts' gate values, normalized as exact routing normalizes them, so the router's
// arithmetic is unchanged and only the choice moves. It trades fidelity for fewer misses: the
// model computes with experts it did not pick first. On random-weight files (every shared test
// model) the cost in quality cannot be shown; docs/results.md gives KL and perplexity figures.
//
// With every expert cached (in core) it picks exactly the top k, so results are bit-identical to
// exact routing; J >= k is exact routing too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

namespace sluice::core {

struct RoutePolicy {
  RoutePolicy() = default;  // not an aggregate: options structs built with designated initializers may leave it out
  bool cache_aware = false;  // false: exact routing (the default)
  int keep = 0;              // J: the true best kept (0: k / 2, at least 1)
  int window = 0;            // M: the ranks a cached expert may come from (0: 2k)
  bool exact() const { return !cache_aware; }
  int keep_for(int64_t k) const { return keep > 0 ? keep : std::max(1, static_cast<int>(k / 2)); }
  int window_for(int64_t k) const { return window > 0 ? window : static_cast<int>(2 * k); }
};

// "exact", "cache-aware", "cache-aware=J" or "cache-aware=J,M"; Error(invalid_argument) naming
// the flag for anything else.
RoutePolicy parse_route_policy(const std::string& text);
// Error(invalid_argument) unless 1 <= J <= k and k <= M for a model whose tokens use k experts.
void check_route_policy(const RoutePolicy& p, int64_t n_expert_used);
std::string describe(const RoutePolicy& p, int64_t n_expert_used);

// The k = ids.size() experts of `sel` (selection scores, [n_expert]) best first: exact top-k, or
// the cache-aware choice above with `cached` ([n_expert], 1 = in RAM). `ranks` is scratch of at
// least min(M, n_expert) ints. No allocation.
void select_experts(std::span<const float> sel, std::span<int32_t> ids, const RoutePolicy& policy,
                    std::span<const uint8_t> cached, std::span<int32_t> ranks);

}  // namespace sluice::core
