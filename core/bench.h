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
// Peak RSS is the process high-water mark over the run (reset before it where the kernel allows).
#pragma once

#include <cstdint>
#include <string>

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
  std::string budget_split;  // Engine::describe_budget()
  std::string io_backend;
  std::string fault_report;  // Engine::describe_faults(): empty without --io-faults
};

BenchResult run_bench(const BenchOptions& options);

// Asks the kernel to drop the file's pages from the page cache (posix_fadvise DONTNEED).
void evict_from_page_cache(const std::string& path);
// VmHWM of this process; reset_peak_rss() restarts it (Linux >= 4.0; a no-op elsewhere).
uint64_t peak_rss_bytes();
void reset_peak_rss();
uint64_t page_cache_bytes();  // /proc/meminfo Cached

}  // namespace sluice::core
