// DecodeMeter: the decode-phase arithmetic of `sluice bench` (app/bench.h), apart from the
// engine so that a test can drive it with a fake clock and fake counters.
//
// The meter reads the clock and the counters (the shard cache's and the prefetcher's totals) at
// three marks: before the first decode token, after the 8th, after the last (n_gen >= 9). Every
// figure divides bytes (or waits, or hits) by time (or tokens) of ONE window:
//   first 8      [start, after token 8]:   decode_first8_tok_s, hit_rate_first8, read_bytes_per_token_first8
//   steady       [after token 8, end]:     decode_tok_s, hit_rate_steady, read_bytes_per_token_steady,
//                                          ceiling_tok_s, achieved_over_ceiling
//   whole decode [start, end]:             hit_rate, read_bytes_per_token, disk_gbps_achieved,
//                                          io_wait_share, io_hidden_share, the byte split below
// Bytes read split into what decode had to read (demand: misses and re-reads) and what was read
// on speculation (the prefetcher's predictions and read-aheads); of the speculative bytes, those
// for experts the step did not route to are the waste. Waste is never counted as miss bytes:
//   read_bytes_per_token = miss_bytes_per_token + speculative_bytes_per_token
//   speculative_waste_bytes_per_token <= speculative_bytes_per_token
// The ceiling is what the disk allows at the steady window's traffic:
//   ceiling_tok_s = disk_gbps_raw / read_bytes_per_token_steady,  achieved_over_ceiling = decode_tok_s / ceiling_tok_s
// It is absent (nullopt, with ceiling_note saying why) when the disk was not probed
// (disk_gbps_raw <= 0: `--probe-seconds 0`) or when the steady window read nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cache/prefetcher.h"
#include "cache/shard_cache.h"

namespace sluice::core {

// The counters the meter reads (all zero when experts are in core: no cache, no prefetcher).
struct DecodeCounters {
  cache::CacheCounters cache;            // totals over every MoE layer
  cache::PredictionCounters predicted;   // the prefetcher's totals
  uint64_t io_busy_ns = 0;               // cache::CacheStats::io_busy_ns
};

struct DecodeFigures {
  double decode_first8_tok_s = 0, decode_tok_s = 0;  // decode_tok_s: the steady window
  double hit_rate = 1, hit_rate_first8 = 1, hit_rate_steady = 1;  // 1 when nothing was accessed
  uint64_t decode_bytes_read = 0;
  double read_bytes_per_token = 0, read_bytes_per_token_first8 = 0, read_bytes_per_token_steady = 0;
  double miss_bytes_per_token = 0, speculative_bytes_per_token = 0, speculative_waste_bytes_per_token = 0;
  double disk_gbps_achieved = 0, io_wait_share = 0, io_hidden_share = 0;
  std::optional<double> ceiling_tok_s, achieved_over_ceiling;
  std::string ceiling_note;  // why there is no ceiling; empty when there is one
};

class DecodeMeter {
 public:
  using Clock = std::function<double()>;             // seconds, monotonic
  using Counters = std::function<DecodeCounters()>;  // the totals now

  // Error(invalid_argument) when n_gen < 9 (8 tokens of warm-up and at least one steady token).
  DecodeMeter(int n_gen, Clock clock, Counters counters);
  void start();                // before the first decode token
  void token_done(int index);  // after decode token `index` (0-based); the 8th (index 7) and the last mark windows
  // After the last token. disk_gbps_raw <= 0: not measured (no ceiling).
  DecodeFigures figures(double disk_gbps_raw) const;

 private:
  struct Mark {
    double seconds = 0;
    DecodeCounters counters;
  };
  Mark mark() const;
  int n_gen_;
  Clock clock_;
  Counters counters_;
  Mark start_, at8_, end_;
  int marks_ = 0;  // 0 before start(), then 1, 2 (at 8), 3 (end)
};

}  // namespace sluice::core
