// run_bench: one measured generation on an Engine, with the figures that explain its speed.
//
// A run: (optionally) evict the model file from the page cache, build the engine inside the
// budget, prefill `n_prompt` random tokens (seeded) in batches of `n_batch`, then decode `n_gen`
// tokens greedily, one at a time. Decode speed is reported for the first 8 tokens and for the
// rest separately (`decode_tok_s` covers tokens 9..n), because a cold cache makes the first ones
// slow. IO figures cover the decode phase:
//   hit_rate            demand accesses that found their shard resident (by demand or prefetch)
//   read_bytes_per_token  bytes read from the file per generated token
//   disk_gbps_achieved  those bytes over the decode wall time
//   io_wait_share       share of decode wall time spent waiting for shards
//   ceiling_tok_s       disk_gbps_raw / read_bytes_per_token: what the disk allows at this traffic
//   achieved_over_ceiling  decode_tok_s / ceiling_tok_s
//   prediction_recall / _precision   speculative gating (--prefetch-depth): share of routed experts
//                       that were predicted / of predicted experts that were routed
//   previous_token_recall  the same recall for "this layer's experts of the previous token"
//   speculative_waste_bytes_per_token  speculative reads for experts not routed in that step
//   io_hidden_share     1 - IO wait / IO busy time (wall time with a read in flight): the share of
//                       IO time hidden behind compute
// and per MoE layer (`layers`) the same prediction figures plus hidden_miss_share: of the demand
// accesses that needed a read (misses + prefetched), the share already landed when demanded.
// Peak RSS is the process high-water mark over the run (reset before it where the kernel allows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/engine.h"

namespace sluice::core {

struct BenchOptions {
  EngineOptions engine;
  int n_prompt = 128;
  int n_gen = 64;
  bool cold = false;
  uint64_t seed = 1;
  double disk_gbps_raw = 0;  // measured by the caller once per invocation (0: not known)
};

struct BenchLayer {
  double prediction_recall = 0, prediction_precision = 0, previous_token_recall = 0;
  uint64_t speculative_wasted_bytes = 0;
  double hidden_miss_share = 0;
};

struct BenchResult {
  uint64_t budget_bytes = 0;
  uint64_t model_bytes = 0;
  double cache_experts_fraction = 0;  // expert arena / routed expert bytes
  double routing_entropy = 0, hottest_over_uniform = 0, temporal_reuse = 0, temporal_reuse_chance = 0;
  double prefill_tok_s = 0, decode_tok_s = 0, decode_first8_tok_s = 0;
  double hit_rate = 0;
  double read_bytes_per_token = 0;
  double disk_gbps_achieved = 0, disk_gbps_raw = 0;
  double ceiling_tok_s = 0, achieved_over_ceiling = 0;
  double io_wait_share = 0;
  uint64_t peak_rss_bytes = 0;
  int64_t page_cache_growth_bytes = 0;  // /proc/meminfo Cached after - before
  uint64_t decode_bytes_read = 0;
  uint64_t evictions = 0;
  int prefetch_depth = 0;
  double prediction_recall = 0, prediction_precision = 0, previous_token_recall = 0;
  double speculative_waste_bytes_per_token = 0;
  double io_hidden_share = 0;
  std::vector<BenchLayer> layers;  // per MoE layer, decode phase
  std::string budget_split;  // Engine::describe_budget()
  std::string io_backend;
};

BenchResult run_bench(const BenchOptions& options);

// Asks the kernel to drop the file's pages from the page cache (posix_fadvise DONTNEED).
void evict_from_page_cache(const std::string& path);
// VmHWM of this process; reset_peak_rss() restarts it (Linux >= 4.0; a no-op elsewhere).
uint64_t peak_rss_bytes();
void reset_peak_rss();
uint64_t page_cache_bytes();  // /proc/meminfo Cached

}  // namespace sluice::core
