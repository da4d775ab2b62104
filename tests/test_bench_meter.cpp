// sluice bench's decode arithmetic (app/decode_meter.h) on a fake clock and fake cache and
// prefetcher counters: which window each figure covers, the ceiling from the steady window's
// bytes and time, miss bytes kept apart from speculative (and wasted) bytes, and no ceiling
// (null in --json, with a note) when the disk was not probed.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/error.h"
#include "app/decode_meter.h"
#include "tests/test_support.h"

using sluice::core::DecodeCounters;
using sluice::core::DecodeFigures;
using sluice::core::DecodeMeter;

namespace {

constexpr double kMB = 1e6;

// A clock and a counter source that play back a script, one entry per reading, and fail the
// test if read more often than the script has entries (each window is read exactly once).
struct Script {
  std::vector<double> seconds;
  std::vector<DecodeCounters> counters;
  size_t clock_reads = 0, counter_reads = 0;
  DecodeMeter::Clock clock() {
    return [this] {
      REQUIRE(clock_reads < seconds.size());
      return seconds[clock_reads++];
    };
  }
  DecodeMeter::Counters source() {
    return [this] {
      REQUIRE(counter_reads < counters.size());
      return counters[counter_reads++];
    };
  }
};

DecodeCounters at(uint64_t bytes, uint64_t hits, uint64_t misses, uint64_t speculative, uint64_t wasted,
                  uint64_t wait_ns = 0, uint64_t busy_ns = 0) {
  DecodeCounters c;
  c.cache.bytes_read = bytes;
  c.cache.hits = hits;
  c.cache.misses = misses;
  c.cache.io_wait_ns = wait_ns;
  c.predicted.issued_bytes = speculative;
  c.predicted.wasted_bytes = wasted;
  c.io_busy_ns = busy_ns;
  return c;
}

// 12 tokens: the first 8 in 2 s reading 100 MB each (a cold cache), then 4 in 1 s reading 10 MB
// each. 30 MB of all that was speculative, 12 MB of it for experts not routed.
Script cold_then_steady() {
  Script s;
  s.seconds = {10.0, 12.0, 13.0};
  s.counters = {at(5 * kMB, 0, 0, 0, 0, 0, 0),
                at(5 * kMB + 800 * kMB, 8, 24, 20 * kMB, 8 * kMB, 1'000'000'000, 2'000'000'000),
                at(5 * kMB + 840 * kMB, 20, 28, 30 * kMB, 12 * kMB, 1'300'000'000, 2'600'000'000)};
  return s;
}

DecodeFigures run(Script& s, int n_gen, double disk_gbps_raw) {
  DecodeMeter meter(n_gen, s.clock(), s.source());
  meter.start();
  for (int i = 0; i < n_gen; ++i) meter.token_done(i);
  return meter.figures(disk_gbps_raw);
}

}  // namespace

TEST_CASE("bench's decode figures take bytes and time from the same window") {
  Script s = cold_then_steady();
  const DecodeFigures f = run(s, 12, 2.0);
  CHECK(s.clock_reads == 3);  // start, after token 8, after the last: no other reading
  CHECK(s.counter_reads == 3);
  // First 8 tokens: 2 s, 800 MB, 8 hits of 32.
  CHECK(f.decode_first8_tok_s == doctest::Approx(4.0));
  CHECK(f.read_bytes_per_token_first8 == doctest::Approx(100 * kMB));
  CHECK(f.hit_rate_first8 == doctest::Approx(0.25));
  // Steady (tokens 9..12): 1 s, 40 MB, 12 hits of 16.
  CHECK(f.decode_tok_s == doctest::Approx(4.0));
  CHECK(f.read_bytes_per_token_steady == doctest::Approx(10 * kMB));
  CHECK(f.hit_rate_steady == doctest::Approx(0.75));
  // The ceiling is the disk over the steady window's bytes per token (not the whole decode's
  // 70 MB/token, which the first 8 cold tokens inflate), and the ratio is steady over steady.
  REQUIRE(f.ceiling_tok_s.has_value());
  CHECK(*f.ceiling_tok_s == doctest::Approx(2e9 / (10 * kMB)));
  REQUIRE(f.achieved_over_ceiling.has_value());
  CHECK(*f.achieved_over_ceiling == doctest::Approx(4.0 / 200.0));
  CHECK(f.ceiling_note.empty());
  // Whole decode: 3 s, 840 MB, 20 hits of 48, 1.3 s waiting of 2.6 s busy.
  CHECK(f.decode_bytes_read == static_cast<uint64_t>(840 * kMB));
  CHECK(f.read_bytes_per_token == doctest::Approx(70 * kMB));
  CHECK(f.disk_gbps_achieved == doctest::Approx(0.28));
  CHECK(f.hit_rate == doctest::Approx(20.0 / 48.0));
  CHECK(f.io_wait_share == doctest::Approx(1.3 / 3.0));
  CHECK(f.io_hidden_share == doctest::Approx(0.5));
}

TEST_CASE("bench keeps speculative and wasted bytes apart from miss bytes") {
  Script s = cold_then_steady();
  const DecodeFigures f = run(s, 12, 2.0);
  CHECK(f.speculative_bytes_per_token == doctest::Approx(30 * kMB / 12));
  CHECK(f.speculative_waste_bytes_per_token == doctest::Approx(12 * kMB / 12));
  CHECK(f.miss_bytes_per_token == doctest::Approx(810 * kMB / 12));  // 840 read - 30 speculative
  CHECK(f.miss_bytes_per_token + f.speculative_bytes_per_token == doctest::Approx(f.read_bytes_per_token));
  // Read-aheads count as speculative too.
  Script ahead = cold_then_steady();
  ahead.counters[2].predicted.ahead_issued_bytes = static_cast<uint64_t>(6 * kMB);
  ahead.counters[2].predicted.ahead_wasted_bytes = static_cast<uint64_t>(6 * kMB);
  const DecodeFigures g = run(ahead, 12, 2.0);
  CHECK(g.speculative_bytes_per_token == doctest::Approx(36 * kMB / 12));
  CHECK(g.speculative_waste_bytes_per_token == doctest::Approx(18 * kMB / 12));
  CHECK(g.miss_bytes_per_token == doctest::Approx(804 * kMB / 12));
}

TEST_CASE("bench has no ceiling, and says why, without a disk probe or without steady reads") {
  Script unprobed = cold_then_steady();
  const DecodeFigures f = run(unprobed, 12, 0.0);
  CHECK_FALSE(f.ceiling_tok_s.has_value());
  CHECK_FALSE(f.achieved_over_ceiling.has_value());
  CHECK(f.ceiling_note.find("--probe-seconds 0") != std::string::npos);
  CHECK(f.decode_tok_s == doctest::Approx(4.0));  // everything else is still measured

  Script cached = cold_then_steady();
  cached.counters[2] = cached.counters[1];  // tokens 9..12 hit the cache only
  const DecodeFigures g = run(cached, 12, 2.0);
  CHECK_FALSE(g.ceiling_tok_s.has_value());
  CHECK(g.ceiling_note.find("tokens 9..12 read nothing") != std::string::npos);
  CHECK(g.hit_rate_steady == doctest::Approx(1.0));
}

TEST_CASE("bench's decode meter needs 9 tokens and all three marks") {
  Script s = cold_then_steady();
  CHECK_THROWS_AS(DecodeMeter(8, s.clock(), s.source()), sluice::Error);
  DecodeMeter meter(12, s.clock(), s.source());
  meter.start();
  for (int i = 0; i < 8; ++i) meter.token_done(i);
  CHECK_THROWS_AS(meter.figures(2.0), sluice::Error);
}

TEST_CASE("sluice bench --probe-seconds 0 reports no ceiling: null in --json and a note in the table") {
  const std::string model = (sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string();
  const std::string common = "bench -m '" + model + "' --cache-experts 25% -p 8 -n 10 -b 8 --probe-seconds 0";
  auto j = sluice::test::run_sluice(common + " --json");
  REQUIRE_MESSAGE(j.exit_code == 0, j.err);
  const auto doc = nlohmann::json::parse(j.out);
  CHECK(doc.at("ceiling_tok_s").is_null());
  CHECK(doc.at("achieved_over_ceiling").is_null());
  CHECK(doc.at("disk_gbps_raw").is_null());
  CHECK(doc.at("ceiling_note").get<std::string>().find("not probed") != std::string::npos);
  CHECK(doc.at("decode_tok_s").get<double>() > 0);
  CHECK(doc.at("miss_bytes_per_token").get<double>() + doc.at("speculative_bytes_per_token").get<double>() ==
        doctest::Approx(doc.at("read_bytes_per_token").get<double>()));
  auto text = sluice::test::run_sluice(common);
  REQUIRE_MESSAGE(text.exit_code == 0, text.err);
  CHECK(text.out.find("raw disk not probed") != std::string::npos);
  CHECK(text.out.find("ceiling: no ceiling: the disk was not probed (--probe-seconds 0)") != std::string::npos);
  auto probed = sluice::test::run_sluice("bench -m '" + model + "' --cache-experts 25% -p 8 -n 10 -b 8 --probe-seconds 0.05 --json");
  REQUIRE_MESSAGE(probed.exit_code == 0, probed.err);
  const auto p = nlohmann::json::parse(probed.out);
  CHECK(p.at("disk_gbps_raw").get<double>() > 0);
  if (p.at("ceiling_tok_s").is_null()) {
    CHECK(p.at("ceiling_note").get<std::string>().find("read nothing") != std::string::npos);
  } else {
    CHECK(p.at("ceiling_tok_s").get<double>() > 0);
    CHECK(p.at("ceiling_note").is_null());
  }
  auto negative = sluice::test::run_sluice("bench -m '" + model + "' -p 8 -n 10 --probe-seconds=-1");
  CHECK(negative.exit_code == 1);
  CHECK(negative.err.find("--probe-seconds") != std::string::npos);
}
