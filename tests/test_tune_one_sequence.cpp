// `sluice tune` on a trace of one sequence: the learned policies cannot be scored leave-one-
// sequence-out, so the default run leaves them out with a note and reports the others; naming
// one explicitly is still refused.
#include <doctest/doctest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "cache/trace.h"
#include "cache/tune.h"
#include "tests/test_support.h"

using namespace sluice;

TEST_CASE("sluice tune with the default policies reports the unlearned ones on a one-sequence trace") {
  const auto source = test::shared_dir() / "traces" / "flame-moe-290m.trace";
  REQUIRE(std::filesystem::exists(source));
  cache::Trace t = cache::read_trace(source);
  REQUIRE(t.sequences.size() > 1);
  t.sequences.resize(1);
  const auto path = test::temp_dir("tune-one") / "one.trace";
  cache::write_trace(path, t);

  auto r = test::run_sluice("tune --trace '" + path.string() + "' --budgets 10%,25% --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("the trace has one sequence, so the learned policies (hot-pin, predict) cannot be scored") !=
        std::string::npos);
  std::set<std::string> policies;
  for (const auto& row : nlohmann::json::parse(r.out)) policies.insert(row.at("policy").get<std::string>());
  CHECK(policies.count("lru") == 1);
  CHECK(policies.count("belady") == 1);
  CHECK(policies.count("hot-pin") == 0);
  CHECK(policies.count("predict") == 0);

  auto explicit_run = test::run_sluice("tune --trace '" + path.string() + "' --policies hot-pin");
  CHECK(explicit_run.exit_code != 0);
  CHECK(explicit_run.err.find("needs at least 2 sequences") != std::string::npos);
}
