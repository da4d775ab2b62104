// `sluice tune` reports each policy's gap to belady in total and per layer (issue #40).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "cache/trace.h"
#include "cache/tune.h"
#include "tests/test_support.h"

using namespace sluice::cache;

namespace {

std::filesystem::path flame_trace() {
  auto p = sluice::test::shared_dir() / "traces" / "flame-moe-290m.trace";
  sluice::test::require_file(p);
  return p;
}

}  // namespace

TEST_CASE("tune's per-layer gaps to belady are belady's layer hit rates minus the policy's and average to the total") {
  Trace trace = read_trace(flame_trace().string());
  TuneOptions o;
  o.budgets = {"10%", "25%"};
  o.policies = {"lru", "predict", "belady"};
  TuneReport rep = run_tune(trace, o);
  REQUIRE(rep.rows.size() == 6);
  for (size_t bi = 0; bi < rep.budgets.size(); ++bi) {
    const TuneRow* bel = rep.find("belady", bi);
    REQUIRE(bel != nullptr);
    for (const char* policy : {"lru", "predict", "belady"}) {
      CAPTURE(policy);
      CAPTURE(rep.budgets[bi].label);
      const TuneRow* row = rep.find(policy, bi);
      REQUIRE(row != nullptr);
      REQUIRE(row->gap_to_belady.has_value());
      CHECK(*row->gap_to_belady == doctest::Approx(bel->hit_rate - row->hit_rate).epsilon(1e-12));
      REQUIRE(row->layer_gaps_to_belady.size() == rep.n_layer);
      REQUIRE(row->layer_accesses.size() == rep.n_layer);
      double weighted = 0, accesses = 0;
      for (size_t l = 0; l < rep.n_layer; ++l) {
        CHECK(row->layer_gaps_to_belady[l] ==
              doctest::Approx(bel->layer_hit_rates[l] - row->layer_hit_rates[l]).epsilon(1e-12));
        weighted += row->layer_gaps_to_belady[l] * static_cast<double>(row->layer_accesses[l]);
        accesses += static_cast<double>(row->layer_accesses[l]);
      }
      CHECK(weighted / accesses == doctest::Approx(*row->gap_to_belady).epsilon(1e-9));
    }
    // The online policies leave a real gap on this trace, at every layer.
    for (double g : rep.find("lru", bi)->layer_gaps_to_belady) CHECK(g > 0.05);
  }
}

TEST_CASE("sluice tune --json carries the gap to belady per layer and null without belady") {
  auto r = sluice::test::run_sluice("tune --trace '" + flame_trace().string() +
                                    "' --budgets 10%,25% --policies lru,predict,belady --json");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  auto rows = nlohmann::json::parse(r.out);
  REQUIRE(rows.size() == 6);
  for (size_t b = 0; b < 2; ++b) {
    const auto& bel = rows[b * 3 + 2];
    REQUIRE(bel["policy"] == "belady");
    for (size_t p = 0; p < 3; ++p) {
      const auto& row = rows[b * 3 + p];
      CAPTURE(row.dump());
      const double gap = row["gap_to_belady"].get<double>();
      CHECK(gap == doctest::Approx(bel["hit_rate"].get<double>() - row["hit_rate"].get<double>()).epsilon(1e-5));
      REQUIRE(row["layer_gaps_to_belady"].size() == 8);
      REQUIRE(row["layer_hit_rates"].size() == 8);
      // FLAME's layers see the same number of accesses, so the plain mean is the total.
      double sum = 0;
      for (size_t l = 0; l < 8; ++l) {
        const double g = row["layer_gaps_to_belady"][l].get<double>();
        CHECK(g == doctest::Approx(bel["layer_hit_rates"][l].get<double>() - row["layer_hit_rates"][l].get<double>())
                       .epsilon(1e-5));
        sum += g;
      }
      CHECK(sum / 8 == doctest::Approx(gap).epsilon(1e-4));
    }
  }
  auto no_bound = sluice::test::run_sluice("tune --trace '" + flame_trace().string() +
                                           "' --budgets 10% --policies lru --json");
  REQUIRE(no_bound.exit_code == 0);
  auto one = nlohmann::json::parse(no_bound.out);
  REQUIRE(one.size() == 1);
  CHECK(one[0]["gap_to_belady"].is_null());
  CHECK(one[0]["layer_gaps_to_belady"].is_null());
}

TEST_CASE("sluice tune prints the gap to belady per layer under its table") {
  auto r = sluice::test::run_sluice("tune --trace '" + flame_trace().string() + "' --budgets 25% --policies lru,belady");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const size_t at = r.out.find("gap to belady");
  REQUIRE(at != std::string::npos);
  const size_t line = r.out.find("  25%    lru         total ", at);
  REQUIRE(line != std::string::npos);
  // Eight per-layer figures after the bar.
  const std::string text = r.out.substr(line, r.out.find('\n', line) - line);
  const std::string layers = text.substr(text.find('|') + 1);
  size_t fields = 0;
  for (size_t i = 0; i < layers.size(); ++i) fields += layers[i] != ' ' && (i == 0 || layers[i - 1] == ' ');
  CHECK(fields == 8);
}
