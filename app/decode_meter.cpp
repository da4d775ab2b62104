#include "app/decode_meter.h"

#include <algorithm>

#include "common/error.h"

namespace sluice::core {

namespace {

constexpr int kFirstWindow = 8;  // tokens in the first (cold) window

double ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

double hit_rate(const cache::CacheCounters& from, const cache::CacheCounters& to) {
  const uint64_t h = to.hits - from.hits, m = to.misses - from.misses;
  return h + m ? static_cast<double>(h) / static_cast<double>(h + m) : 1.0;
}

uint64_t speculative_bytes(const cache::PredictionCounters& p) { return p.issued_bytes + p.ahead_issued_bytes; }
uint64_t speculative_waste(const cache::PredictionCounters& p) { return p.wasted_bytes + p.ahead_wasted_bytes; }

}  // namespace

DecodeMeter::DecodeMeter(int n_gen, Clock clock, Counters counters)
    : n_gen_(n_gen), clock_(std::move(clock)), counters_(std::move(counters)) {
  if (n_gen_ <= kFirstWindow) {
    throw Error(ErrorCode::invalid_argument, "-n must be at least 9 (8 warm-up tokens + 1)");
  }
}

DecodeMeter::Mark DecodeMeter::mark() const { return {clock_(), counters_()}; }

void DecodeMeter::start() {
  start_ = mark();
  marks_ = 1;
}

void DecodeMeter::token_done(int index) {
  if (index == kFirstWindow - 1) {
    at8_ = mark();
    marks_ = 2;
  }
  if (index == n_gen_ - 1) {
    end_ = mark();
    marks_ = 3;
  }
}

DecodeFigures DecodeMeter::figures(double disk_gbps_raw) const {
  if (marks_ != 3) throw Error(ErrorCode::internal, "DecodeMeter: figures() before the last decode token");
  const cache::CacheCounters &c0 = start_.counters.cache, &c8 = at8_.counters.cache, &c1 = end_.counters.cache;
  const double first_s = at8_.seconds - start_.seconds, steady_s = end_.seconds - at8_.seconds;
  const double decode_s = end_.seconds - start_.seconds;
  const int steady_tokens = n_gen_ - kFirstWindow;

  DecodeFigures f;
  f.decode_first8_tok_s = ratio(kFirstWindow, first_s);
  f.decode_tok_s = ratio(steady_tokens, steady_s);
  f.hit_rate = hit_rate(c0, c1);
  f.hit_rate_first8 = hit_rate(c0, c8);
  f.hit_rate_steady = hit_rate(c8, c1);

  f.decode_bytes_read = c1.bytes_read - c0.bytes_read;
  const uint64_t steady_bytes = c1.bytes_read - c8.bytes_read;
  f.read_bytes_per_token = static_cast<double>(f.decode_bytes_read) / n_gen_;
  f.read_bytes_per_token_first8 = static_cast<double>(c8.bytes_read - c0.bytes_read) / kFirstWindow;
  f.read_bytes_per_token_steady = static_cast<double>(steady_bytes) / steady_tokens;

  const uint64_t speculative =
      speculative_bytes(end_.counters.predicted) - speculative_bytes(start_.counters.predicted);
  const uint64_t waste = speculative_waste(end_.counters.predicted) - speculative_waste(start_.counters.predicted);
  // Demand reads are what is left of the bytes read; a speculative read is counted as issued
  // and as read at the same moment, so the difference is never negative in a consistent window.
  const uint64_t demand = f.decode_bytes_read - std::min(f.decode_bytes_read, speculative);
  f.miss_bytes_per_token = static_cast<double>(demand) / n_gen_;
  f.speculative_bytes_per_token = static_cast<double>(speculative) / n_gen_;
  f.speculative_waste_bytes_per_token = static_cast<double>(waste) / n_gen_;

  f.disk_gbps_achieved = ratio(static_cast<double>(f.decode_bytes_read), decode_s) / 1e9;
  const double wait_s = static_cast<double>(c1.io_wait_ns - c0.io_wait_ns) / 1e9;
  f.io_wait_share = ratio(wait_s, decode_s);
  const uint64_t busy_ns = end_.counters.io_busy_ns - start_.counters.io_busy_ns;
  f.io_hidden_share = busy_ns ? std::max(0.0, 1.0 - static_cast<double>(c1.io_wait_ns - c0.io_wait_ns) / busy_ns) : 0.0;

  if (disk_gbps_raw <= 0) {
    f.ceiling_note = "no ceiling: the disk was not probed (--probe-seconds 0)";
  } else if (steady_bytes == 0) {
    f.ceiling_note = "no ceiling: tokens 9.." + std::to_string(n_gen_) + " read nothing from disk";
  } else {
    f.ceiling_tok_s = disk_gbps_raw * 1e9 / f.read_bytes_per_token_steady;
    f.achieved_over_ceiling = f.decode_tok_s / *f.ceiling_tok_s;
  }
  return f;
}

}  // namespace sluice::core
