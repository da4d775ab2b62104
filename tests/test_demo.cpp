// sluice demo: synthesizes once into --dir, reuses the file afterwards, and shows the run's live
// stats and the bench summary. Run on the tiny-deepseek2 preset so it takes seconds; the default
// (a few GB, Kimi-K2-shaped) is the same code path with bigger numbers.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "tests/test_support.h"

using sluice::test::run_sluice;
using sluice::test::temp_dir;

TEST_CASE("demo synthesizes once, then runs and benchmarks the cached model") {
  const auto dir = temp_dir("demo");
  const std::string args = "demo --dir " + dir.string() + " --preset tiny-deepseek2 --layers 3 --experts 16 -n 4 -t 1";

  const auto first = run_sluice(args);
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  CHECK(first.out.find("$ sluice synth --preset tiny-deepseek2") != std::string::npos);
  const auto model = dir / "demo-tiny-deepseek2-3L-16e-Q2_K.gguf";
  CHECK(std::filesystem::exists(model));
  CHECK_FALSE(std::filesystem::exists(model.string() + ".partial"));
  // Live stats from the run (one line per token on stderr) and the bench summary.
  CHECK(first.err.find("[token 1]") != std::string::npos);
  CHECK(first.out.find("$ sluice bench -m") != std::string::npos);
  CHECK(first.out.find("ach/ceil") != std::string::npos);
  CHECK(first.out.find("MB/token") != std::string::npos);

  const auto again = run_sluice(args);
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(again.out.find("using the model synthesized earlier") != std::string::npos);
  CHECK(again.out.find("$ sluice synth") == std::string::npos);
}

TEST_CASE("demo rejects a bad generation length and an unknown preset") {
  const auto dir = temp_dir("demo-bad");
  const auto bad_n = run_sluice("demo --dir " + dir.string() + " -n 0");
  CHECK(bad_n.exit_code != 0);
  CHECK(bad_n.err.find("-n 0") != std::string::npos);
  const auto bad_preset = run_sluice("demo --dir " + dir.string() + " --preset no-such-model");
  CHECK(bad_preset.exit_code != 0);
  CHECK(bad_preset.err.find("no-such-model") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "demo-no-such-model-3L-96e-Q2_K.gguf"));
}
