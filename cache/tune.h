// `sluice tune`: sweep eviction policies over cache budgets on a routing trace and predict
// decode speed from disk bandwidth. All logic lives here so tests reach it; the CLI
// (tools/cmd_tune.cpp) only parses flags and prints.
//
// Budgets are either fractions of all routed experts ("10%": one pool of floor(0.10 * L * E)
// shard slots shared by all layers) or byte sizes ("8G", needs a shard size): the expert cache
// gets budget - resident bytes, in whole shards. Every policy is scored leave-one-sequence-out
// (cache_simulator.h); Belady is the clairvoyant upper bound.
//
// Predicted decode tok/s = min(disk_GBps * 1e9 / miss_bytes_per_token,
//                              mem_GBps * 1e9 / (resident_bytes + L * K * shard_bytes)):
// the disk bound, capped by streaming the active weights from RAM once per token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_simulator.h"
#include "cache/trace.h"

namespace sluice::cache {

struct TuneBudget {
  std::string label;             // as given: "10%" or "8G"
  double fraction = 0;           // capacity_slots / (L * E)
  uint64_t capacity_slots = 0;
  uint64_t budget_bytes = 0;     // resident + capacity * shard_bytes; 0 when shard size unknown
};

struct TuneOptions {
  std::vector<std::string> budgets = {"5%", "10%", "25%", "50%"};
  std::vector<std::string> policies = {"lru", "lfu", "lru-quota", "freq", "hot-pin", "predict", "adaptive", "belady",
                                       "lookahead"};
  uint64_t shard_bytes = 0;      // one expert's gate+up+down bytes; 0: unknown
  uint64_t resident_bytes = 0;   // non-expert weights kept in RAM (count against the budget)
  double disk_gbps = 3.0;
  double mem_gbps = 50.0;
  PolicyOptions policy_options;
};

struct TuneRow {
  std::string policy;
  bool clairvoyant = false;
  TuneBudget budget;
  double hit_rate = 0;
  double misses_per_token = 0;
  std::optional<double> miss_bytes_per_token;  // needs shard_bytes
  std::optional<double> predicted_tok_s;
  std::vector<double> layer_hit_rates;
  std::vector<uint64_t> layer_accesses;  // hits + misses at each layer (weights for per-layer figures)
  // Belady's hit rate minus this row's at the same budget, in total and per layer (a fraction;
  // 0 for belady itself). Unset / empty when belady is not among the policies. The per-layer
  // gaps weighted by layer_accesses average to the total.
  std::optional<double> gap_to_belady;
  std::vector<double> layer_gaps_to_belady;
};

struct TuneReport {
  std::string model;
  uint32_t n_layer = 0, n_expert = 0, topk = 0;
  size_t n_sequences = 0;
  uint64_t n_tokens = 0;
  uint64_t shard_bytes = 0;
  std::vector<TuneBudget> budgets;
  std::vector<TuneRow> rows;  // budget-major, policies in the order given
  std::string recommendation;
  const TuneRow* find(std::string_view policy, size_t budget_index) const;
};

// Throws Error(invalid_argument) for unparsable budgets or byte budgets without a shard size,
// Error(budget) when a budget holds fewer than topk shards (stating the minimum).
std::vector<TuneBudget> parse_budgets(const std::vector<std::string>& budgets, const TraceHeader& header,
                                      uint64_t shard_bytes, uint64_t resident_bytes);

// The policies `sluice tune` runs when none are named: every policy, except that a trace of one
// sequence cannot score the learned ones (hot-pin, predict) leave-one-sequence-out, so they are
// left out and `note` says so in one line (empty otherwise).
// With `cold` (no profile, as `sluice run` without --warm), hot-pin is left out too.
std::vector<std::string> default_policies(const Trace& trace, std::string& note, bool cold = false);

TuneReport run_tune(const Trace& trace, const TuneOptions& options);

std::string format_tune_text(const TuneReport& report);
// [{"policy", "budget_fraction", "budget_bytes", "hit_rate", "miss_bytes_per_token",
//   "predicted_tok_s", "gap_to_belady", "layer_hit_rates", "layer_gaps_to_belady"}, ...];
// unknown values (no shard size; no belady row for the gaps) are null.
std::string format_tune_json(const TuneReport& report);
// Hit rate vs budget, one polyline per policy, Belady dashed.
std::string format_tune_svg(const TuneReport& report);

}  // namespace sluice::cache
