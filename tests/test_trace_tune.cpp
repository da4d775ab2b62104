// Trace simulation over the shared traces, the tune report, and `sluice tune` end to end.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "cache/cache_simulator.h"
#include "cache/trace.h"
#include "cache/tune.h"
#include "common/error.h"
#include "tests/test_support.h"

using namespace sluice::cache;
using sluice::Error;
using sluice::ErrorCode;

namespace {

std::filesystem::path trace_path(const char* name) { return sluice::test::shared_dir() / "traces" / name; }

// Missing shared traces fail the case (reference data is part of the test setup, not optional).
void require_traces() {
  sluice::test::require_file(trace_path("mixtral-8x7b.trace"));
  sluice::test::require_file(trace_path("flame-moe-290m.trace"));
}

}  // namespace

TEST_CASE("on both shared traces belady bounds every policy and predict beats lru where lru thrashes") {
  require_traces();
  for (const char* name : {"mixtral-8x7b.trace", "flame-moe-290m.trace"}) {
    Trace t = read_trace(trace_path(name));
    const uint64_t n = t.n_shards();
    for (double f : {0.10, 0.25}) {
      uint64_t cap = static_cast<uint64_t>(f * n);
      double bound = evaluate_policy(t, "belady", cap).hit_rate();
      for (const auto& p : policy_names()) {
        SimResult r = evaluate_policy(t, p, cap);
        CAPTURE(name);
        CAPTURE(p);
        CAPTURE(f);
        CHECK(r.hits + r.misses == t.n_tokens() * t.header.n_layer * t.header.topk);
        CHECK(r.hit_rate() <= bound + 1e-12);
      }
    }
  }
  // Mixtral at 10%: 25 slots < 64 shards a token touches, so LRU evicts exactly what the next
  // token needs and never hits; predict keeps the layers it will reach soonest.
  Trace m = read_trace(trace_path("mixtral-8x7b.trace"));
  CHECK(evaluate_policy(m, "lru", 25).hit_rate() == 0.0);
  CHECK(evaluate_policy(m, "predict", 25).hit_rate() > 0.10);
}

TEST_CASE("predict's token-to-token transitions, learned leave-one-sequence-out, add hits on FLAME-MoE") {
  require_traces();
  // FLAME-MoE at 25% (128 slots): 40.4% without them, 42.1% with them when measured.
  Trace t = read_trace(trace_path("flame-moe-290m.trace"));
  PolicyOptions off;
  off.predict_next_token = false;
  const double with = evaluate_policy(t, "predict", 128).hit_rate();
  const double without = evaluate_policy(t, "predict", 128, off).hit_rate();
  CAPTURE(with);
  CAPTURE(without);
  CHECK(with > without + 0.01);
  CHECK(with > evaluate_policy(t, "lru", 128).hit_rate() + 0.05);
}

TEST_CASE("without a profile (tune --cold, as run without --warm) predict stays within 1 point of every fixed policy") {
  require_traces();
  PolicyOptions cold;
  cold.learn_profile = false;
  for (const char* name : {"mixtral-8x7b.trace", "flame-moe-290m.trace"}) {
    Trace t = read_trace(trace_path(name));
    for (double f : {0.10, 0.25}) {
      const uint64_t cap = static_cast<uint64_t>(f * t.n_shards());
      CAPTURE(name);
      CAPTURE(f);
      const double predict = evaluate_policy(t, "predict", cap, cold).hit_rate();
      // Cold is not the profiled score: the prior from the other sequences is really withheld.
      CHECK(predict != evaluate_policy(t, "predict", cap).hit_rate());
      for (const char* fixed : {"lru", "lfu", "lru-quota", "freq"}) {
        CAPTURE(fixed);
        CHECK(predict >= evaluate_policy(t, fixed, cap).hit_rate() - 0.01);
      }
      CHECK_THROWS_AS(evaluate_policy(t, "hot-pin", cap, cold), Error);
    }
  }
  const auto r = sluice::test::run_sluice("tune --cold --trace '" + trace_path("flame-moe-290m.trace").string() +
                                          "' --budgets 10%");
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("predict") != std::string::npos);
  CHECK(r.out.find("hot-pin") == std::string::npos);
}

TEST_CASE("the Python policy study's simulator counts the same hits as the C++ one on FLAME-MoE") {
  // scripts/policy_study/ backs the foresight bounds quoted for #8; it must replay the trace as
  // cache_simulator.cpp does.
  require_traces();
  REQUIRE_MESSAGE(sluice::test::run_command("command -v python3").exit_code == 0,
                  "python3 is missing (scripts/setup installs it)");
  const std::string dir = (sluice::test::source_dir() / "scripts/policy_study").string();
  auto r = sluice::test::run_command(
      "python3 -c \"import sys; sys.path.insert(0, '" + dir +
      "'); from sim import *; s, L, E, K = load(FLAME); C = budget(L, E); "
      "print(evaluate(s, L, E, K, lambda tr, te: LRU(), C)[0], evaluate(s, L, E, K, lambda tr, te: Belady(te), C)[0])\"");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  double lru = 0, belady = 0;
  REQUIRE(std::sscanf(r.out.c_str(), "%lf %lf", &lru, &belady) == 2);
  Trace t = read_trace(trace_path("flame-moe-290m.trace"));
  CHECK(lru == doctest::Approx(evaluate_policy(t, "lru", 128).hit_rate()).epsilon(1e-9));
  CHECK(belady == doctest::Approx(evaluate_policy(t, "belady", 128).hit_rate()).epsilon(1e-9));
}

TEST_CASE("tune budgets parse percentages and sizes and refuse ones below the working set") {
  TraceHeader h{"toy", 4, 8, 2, {}};
  auto b = parse_budgets({"25%", "1G"}, h, 100u << 20, 512u << 20);
  REQUIRE(b.size() == 2);
  CHECK(b[0].capacity_slots == 8);
  CHECK(b[0].budget_bytes == (512u << 20) + 8 * (100u << 20));
  CHECK(b[1].capacity_slots == 5);  // (1 GiB - 512 MiB) / 100 MiB
  CHECK(b[1].fraction == doctest::Approx(5.0 / 32));
  try {
    parse_budgets({"1%"}, h, 0, 0);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::budget);
    CHECK(std::string(e.what()).find("the minimum is 6.25%") != std::string::npos);
  }
  try {
    parse_budgets({"8G"}, h, 0, 0);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("needs --shard-mb") != std::string::npos);
  }
}

TEST_CASE("sluice tune prints a report with belady and a recommendation on both shared traces") {
  require_traces();
  for (const char* name : {"mixtral-8x7b.trace", "flame-moe-290m.trace"}) {
    auto r = sluice::test::run_sluice("tune --trace '" + trace_path(name).string() + "' --budgets 10%,25%");
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("belady") != std::string::npos);
    CHECK(r.out.find("recommendation: ") != std::string::npos);
    CHECK(r.out.find("leave-one-sequence-out") != std::string::npos);
  }
}

TEST_CASE("sluice tune --json emits one row per policy and budget with the documented fields") {
  require_traces();
  auto dir = sluice::test::temp_dir("tune");
  auto svg = dir / "plot.svg";
  auto profile = dir / "flame.profile";
  auto r = sluice::test::run_sluice("tune --trace '" + trace_path("flame-moe-290m.trace").string() +
                                    "' --budgets 10%,25% --policies lru,predict,belady --shard-mb 2 "
                                    "--disk-gbps 6 --json --plot '" + svg.string() + "' --profile-out '" +
                                    profile.string() + "'");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  auto rows = nlohmann::json::parse(r.out);
  REQUIRE(rows.is_array());
  REQUIRE(rows.size() == 6);
  for (const auto& row : rows) {
    for (const char* field : {"policy", "budget_fraction", "budget_bytes", "hit_rate", "miss_bytes_per_token",
                              "predicted_tok_s"}) {
      CHECK(row.contains(field));
    }
    CHECK(row["hit_rate"].get<double>() >= 0.0);
    CHECK(row["hit_rate"].get<double>() <= 1.0);
    double miss = row["miss_bytes_per_token"].get<double>();
    double tok_s = row["predicted_tok_s"].get<double>();
    CHECK(tok_s <= 6e9 / miss * 1.0001);
  }
  CHECK(rows[0]["policy"] == "lru");
  CHECK(rows[0]["budget_fraction"].get<double>() == doctest::Approx(51.0 / 512));
  CHECK(rows[0]["budget_bytes"].get<uint64_t>() == 51ull * 2 * 1024 * 1024);
  std::string plot = sluice::test::read_text(svg);
  CHECK(plot.find("<svg") == 0);
  CHECK(plot.find("stroke-dasharray") != std::string::npos);  // Belady dashed
  CHECK(plot.find("predict") != std::string::npos);
  ExpertProfile p = parse_profile(sluice::test::read_text(profile), profile.string());
  CHECK(p.n_layer == 8);
  CHECK(p.n_tokens == 1280);
}

TEST_CASE("sluice tune rejects bad flags with one line and a non-zero exit") {
  require_traces();
  auto r = sluice::test::run_sluice("tune --trace '" + trace_path("mixtral-8x7b.trace").string() +
                                    "' --policies lru,fifo");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("unknown eviction policy 'fifo'") != std::string::npos);
  auto r2 = sluice::test::run_sluice("tune --trace /nonexistent.trace");
  CHECK(r2.exit_code == 1);
  CHECK(r2.err.find("cannot open trace '/nonexistent.trace'") != std::string::npos);
  auto r3 = sluice::test::run_sluice("tune --trace '" + trace_path("mixtral-8x7b.trace").string() + "' --budgets 0.1%");
  CHECK(r3.exit_code == 1);
  CHECK(r3.err.find("minimum is") != std::string::npos);
}
