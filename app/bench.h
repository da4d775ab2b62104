// run_bench: one measured generation on an Engine, with the figures that explain its speed.
//
// A run: (optionally) evict the model file from the page cache, build the engine inside the
// budget, prefill `n_prompt` random tokens (seeded) in batches of `n_batch`, then decode `n_gen`
// tokens greedily, one at a time. Decode speed is reported for the first 8 tokens and for the
// rest separately (`decode_tok_s` covers tokens 9..n), because a cold cache makes the first ones
// slow. The decode arithmetic (which window each figure covers) is app/decode_meter.h's.
// IO figures cover the decode phase:
//   hit_rate            demand accesses that found their shard resident (by demand or prefetch)
//   read_bytes_per_token  bytes read from the file per generated token, = miss_bytes_per_token
//                       (what decode had to read) + speculative_bytes_per_token (prefetch)
//   disk_gbps_achieved  those bytes over the decode wall time
//   io_wait_share       share of decode wall time spent waiting for shards
//   ceiling_tok_s       disk_gbps_raw / read_bytes_per_token_steady: what the disk allows at the
//                       traffic of tokens 9..n (the window decode_tok_s covers)
//   achieved_over_ceiling  decode_tok_s / ceiling_tok_s
//   ceiling_note        why there is no ceiling (nullopt ceiling and ratio; null in --json): the
//                       disk was not probed (--probe-seconds 0), or tokens 9..n read nothing
//   prediction_recall / _precision   speculative gating (--prefetch-depth): share of routed experts
//                       that were predicted / of predicted experts that were routed
//   previous_token_recall  the same recall for "this layer's experts of the previous token"
//   speculative_waste_bytes_per_token  speculative reads for experts not routed in that step
//   io_hidden_share     1 - IO wait / IO busy time (wall time with a read in flight): the share of
//                       IO time hidden behind compute
// The prefill phase has its own IO figures: prefill_bytes_read, prefill_io_wait_share (of the
// prefill wall time), and the read-ahead of a large batch's next layer (prefill_read_ahead_bytes
// started, prefill_read_ahead_wasted_bytes of them for experts that layer did not route to).
// Per MoE layer (`layers`) the same prediction figures plus hidden_miss_share: of the demand
// accesses that needed a read (misses + prefetched), the share already landed when demanded.
// With engine.gpu the gpu_* fields describe the VRAM tier (decode-phase counters).
// Peak RSS is the process high-water mark over the run (reset before it where the kernel allows).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/engine.h"

namespace sluice::core {

class TraceRecorder;  // app/trace_recorder.h
class ExpertParallel;  // app/expert_parallel.h

struct BenchOptions {
  EngineOptions engine;
  int n_prompt = 128;
  int n_gen = 64;
  bool cold = false;
  uint64_t seed = 1;
  double disk_gbps_raw = 0;  // measured by the caller once per invocation (0: not known)
  // --trace-out / --profile-out: this run becomes one sequence of the recorder (prefill and
  // decode tokens). Null: nothing recorded.
  TraceRecorder* recorder = nullptr;
  // --warm (engine.warm_profile): called as the preload lands (bytes done, bytes total).
  std::function<void(uint64_t, uint64_t)> warm_progress;
  // --expert-parallel: the job this rank belongs to (engine.session.exchange is its exchange);
  // null: one process.
  const ExpertParallel* parallel = nullptr;
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
  uint64_t prefill_bytes_read = 0, prefill_read_ahead_bytes = 0, prefill_read_ahead_wasted_bytes = 0;
  double prefill_io_wait_share = 0;
  double hit_rate = 0;
  // The first 8 decode tokens alone and tokens 9..n alone: what a cold (or warm) start costs.
  double hit_rate_first8 = 0, hit_rate_steady = 0;
  double read_bytes_per_token_first8 = 0, read_bytes_per_token_steady = 0;
  double read_bytes_per_token = 0;
  double miss_bytes_per_token = 0, speculative_bytes_per_token = 0;
  double disk_gbps_achieved = 0;
  std::optional<double> disk_gbps_raw;  // nullopt: not probed
  std::optional<double> ceiling_tok_s, achieved_over_ceiling;
  std::string ceiling_note;  // why there is no ceiling
  double io_wait_share = 0;
  uint64_t peak_rss_bytes = 0;
  int64_t page_cache_growth_bytes = 0;  // /proc/meminfo Cached after - before
  uint64_t decode_bytes_read = 0;
  uint64_t evictions = 0;
  uint64_t warm_shards = 0, warm_bytes = 0;  // preloaded by --warm before the prompt
  double warm_seconds = 0;
  int prefetch_depth = 0;
  double prediction_recall = 0, prediction_precision = 0, previous_token_recall = 0;
  double speculative_waste_bytes_per_token = 0;
  double io_hidden_share = 0;
  std::vector<BenchLayer> layers;  // per MoE layer, decode phase
  std::string budget_split;  // Engine::describe_budget()
  std::string io_backend;
  // --gpu (all zero without it). Counters cover the decode phase, like the IO figures.
  bool gpu = false;
  std::string gpu_tier;              // GpuTier::describe(): device, VRAM split, rates
  uint64_t gpu_vram_bytes = 0, gpu_resident_bytes = 0, gpu_expert_slots = 0;
  double gpu_expert_hit_rate = 0;    // VRAM hits / (hits + misses) over expert pins
  uint64_t gpu_products = 0, gpu_cpu_products = 0;
  uint64_t gpu_experts_copied = 0, gpu_copy_bytes = 0, gpu_cpu_fallbacks = 0;
  uint64_t gpu_upload_bytes = 0, gpu_evictions = 0;
  double gpu_h2d_gbps = 0, gpu_cpu_matvec_gbps = 0;
  std::string fault_report;  // Engine::describe_faults(): empty without --io-faults
  std::vector<std::string> notices;  // Engine::notices(): what the engine chose or could not do
  // Decode phase, this rank (with --expert-parallel; one process: the exchange fields are 0).
  // Time per token splits into IO wait (io_wait_share), the exchange of expert outputs
  // (exchange_s_per_token, which includes waiting for slower ranks) and compute (the rest).
  uint64_t decode_hits = 0, decode_misses = 0;  // demand accesses of the expert cache
  uint64_t expert_arena_bytes = 0;
  double decode_s_per_token = 0, compute_s_per_token = 0, exchange_s_per_token = 0;
  double exchange_bytes_per_token = 0;  // received from the other ranks
  double exchange_wait_s_per_token = 0;  // of exchange_s_per_token, in the wait after the shared expert
};

BenchResult run_bench(const BenchOptions& options);

// Asks the kernel to drop the file's pages from the page cache (posix_fadvise DONTNEED).
void evict_from_page_cache(const std::string& path);
// VmHWM of this process; reset_peak_rss() restarts it (Linux >= 4.0; a no-op elsewhere).
uint64_t peak_rss_bytes();
void reset_peak_rss();
uint64_t page_cache_bytes();  // /proc/meminfo Cached

}  // namespace sluice::core
