// EvictionPolicy: decides which resident, unpinned shard leaves the cache.
//
// One interface serves both the real ShardCache and the trace simulator (cache_simulator.h), so
// a policy measured by `sluice tune` is the very code the engine runs. The cache owns residency,
// pins and size classes; the policy only keeps bookkeeping and ranks candidates.
//
// Call protocol (both callers follow it exactly; Belady depends on it):
//   reset(geometry)                 once, before anything else (and again to start cold)
//   on_token()                      a new token begins (decode step); drives aging/decay
//   for every shard the forward pass uses, in use order:
//     hit:  on_access(key, true)
//     miss: while no free slot of the right size class:
//             i = choose_victim(candidates, key); on_evict(candidates[i])
//           on_insert(key); on_access(key, false)
//   speculative loads (prefetch) call on_insert without on_access; on_evict when they leave.
//
// `candidates` holds only shards that may legally go: resident, landed, unpinned, in the size
// class the incoming shard needs. Pinned shards never appear, so a policy cannot evict a shard
// in use. It is never empty (the caller raises a budget error instead). A policy returns an
// index into it, and its choice must not depend on the order of `candidates` (break ties by
// something per shard, e.g. last access), so the cache and the simulator, which list candidates
// in different orders, decide alike. Every accessed shard is made resident before use: there is no bypass.
//
// Per-shard state is indexed densely by shard_index(key, n_expert). A policy instance is used by
// one cache at a time; the cache serialises calls under its lock.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/shard_key.h"

namespace sluice::cache {

struct PolicyGeometry {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t n_expert_used = 0;   // experts one token uses per layer (top-k)
  uint64_t capacity_slots = 0;  // shards the cache can hold (all size classes together)
  size_t n_shards() const { return static_cast<size_t>(n_layer) * n_expert; }
};

// Reuse gaps at or above this (and "never used") share one bucket.
constexpr uint32_t kMaxReuseGap = 32;

// Expert usage counts per (layer, expert), learned from routing traces (trace.h builds one).
// Used by the hot-set and predictive policies as a prior; empty means "no profile".
struct ExpertProfile {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint64_t n_tokens = 0;
  std::vector<double> counts;  // [n_layer * n_expert], selections per shard
  // Reuse statistics: reuse_trials[g] / reuse_hits[g] count, over all layers, how often an
  // expert last used g visits (tokens) ago at its layer was used at the next visit.
  std::vector<double> reuse_trials;
  std::vector<double> reuse_hits;
  // Layer-to-layer transitions within a token: transitions[(l * E + i) * E + j] counts tokens
  // that chose i at layer l-1 and j at layer l; transition_src[l * E + i] counts tokens that
  // chose i at layer l-1 (l >= 1; layer 0 rows stay zero). Empty when not collected.
  std::vector<double> transitions;
  std::vector<double> transition_src;
  // Token-to-token transitions at one layer: next_transitions[(l * E + i) * E + j] counts tokens
  // that chose i at layer l and whose successor chose j at layer l; next_src[l * E + i] counts
  // tokens with a successor that chose i at layer l. Empty when not collected.
  std::vector<double> next_transitions;
  std::vector<double> next_src;
  bool empty() const { return counts.empty(); }
  double count(ShardKey k) const { return counts[shard_index(k, n_expert)]; }
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  virtual void reset(const PolicyGeometry& geometry) = 0;
  virtual void on_token() {}
  virtual void on_access(ShardKey key, bool hit) = 0;
  virtual void on_insert(ShardKey key) { (void)key; }
  virtual void on_evict(ShardKey key) { (void)key; }
  virtual size_t choose_victim(std::span<const ShardKey> candidates, ShardKey incoming) = 0;
};

// Knobs for make_policy; defaults are what `sluice tune` measured best on the shared traces.
struct PolicyOptions {
  const ExpertProfile* profile = nullptr;  // hot-pin needs one; predict uses one as prior
  // evaluate_policy: learn a leave-one-sequence-out profile for the policies that use one (false:
  // none, as `sluice run` without --warm has; hot-pin cannot run then).
  bool learn_profile = true;
  std::span<const ShardKey> future;        // belady: every on_access key, in order
  double lfu_half_life_tokens = 32;        // lfu: counts halve every this many tokens
  double freq_lambda = 0.1;                // freq (LRFU): weight of an access halves per 1/λ tokens
  double hot_fraction = 0.5;               // hot-pin: share of capacity pinned by profile
  double predict_freq_weight = 0.5;        // predict: exponent on relative expert frequency
  uint32_t predict_horizon = 0;            // predict: layers ahead scored by layer-to-layer transitions
  double predict_profile_tokens = 8;       // predict: weight of the profile's frequencies, in tokens
  bool predict_next_token = true;          // predict: score the next visit with token-to-token transitions
  uint32_t lookahead_tokens = 2;           // lookahead: tokens of routing seen beyond the current one
  double adaptive_half_life_tokens = 32;   // adaptive: a candidate's shadow hits halve every this many tokens
};

// Names: lru, lfu, lru-quota, freq, hot-pin, predict, adaptive, belady, lookahead (belady and
// lookahead are clairvoyant bounds for the simulator).
//
// adaptive (policy_adaptive.cpp) runs lru, lfu, lru-quota, freq and predict side by side, each
// made by make_policy with the same options (so predict uses `profile` when one is given, and
// learns online only without). Every candidate simulates its own metadata-only cache of
// capacity_slots shards on the access stream, exactly as cache_simulator.h replays a trace; its
// hits there, halving every adaptive_half_life_tokens tokens, are its score. choose_victim goes
// to the best-scoring candidate, ranking the real candidates with a second instance of it that
// sees the real cache's events. It costs the five candidates' bookkeeping twice over.
// Throws Error(invalid_argument) for an unknown name listing the known ones, and for hot-pin
// without a profile or belady without a future.
std::unique_ptr<EvictionPolicy> make_policy(std::string_view name, const PolicyOptions& options = {});
const std::vector<std::string>& policy_names();
bool policy_needs_profile(std::string_view name);  // learned from traces: scored leave-one-out
bool policy_requires_profile(std::string_view name);  // cannot run without one (hot-pin)
bool policy_is_clairvoyant(std::string_view name);

// One factory per policy file.
std::unique_ptr<EvictionPolicy> make_lru_policy();
std::unique_ptr<EvictionPolicy> make_lfu_policy(double half_life_tokens);
std::unique_ptr<EvictionPolicy> make_lru_quota_policy();
std::unique_ptr<EvictionPolicy> make_freq_policy(double lambda);
std::unique_ptr<EvictionPolicy> make_hot_pin_policy(const ExpertProfile& profile, double hot_fraction);
std::unique_ptr<EvictionPolicy> make_predict_policy(const ExpertProfile* profile, double freq_weight,
                                                    uint32_t horizon, double profile_tokens, bool next_token = true);
std::unique_ptr<EvictionPolicy> make_adaptive_policy(const PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_belady_policy(std::span<const ShardKey> future);
std::unique_ptr<EvictionPolicy> make_lookahead_policy(std::span<const ShardKey> future, uint32_t window_tokens);

// What an adaptive policy has seen: its candidates in tie-break order, each one's shadow hits
// since reset and decayed score, and the index of the candidate choose_victim follows now.
// Completes the step in progress (the shadow caches take whole steps): call it between tokens.
// Throws Error(invalid_argument) for a policy other than adaptive.
struct AdaptiveStatus {
  std::vector<std::string> candidates;
  std::vector<uint64_t> shadow_hits;
  std::vector<double> scores;
  size_t leader = 0;
};
AdaptiveStatus adaptive_status(EvictionPolicy& policy);

}  // namespace sluice::cache
