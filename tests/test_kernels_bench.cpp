// sluice bench kernels: runs end to end on a small matrix and rejects bad options.
#include <doctest/doctest.h>

#include <string>

#include "tests/test_support.h"

namespace {
// The subcommand as registered in tools/main.cpp.
const std::string kBench = "bench kernels";
}  // namespace

TEST_CASE("the kernel benchmark prints GB/s, GFLOP/s and the ratio to memory bandwidth per type") {
  const auto r = sluice::test::run_sluice(kBench + " --mb 1 --seconds 0.01 --threads 2 --types q4_K,f16");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("streaming read") != std::string::npos);
  CHECK(r.out.find("GFLOP/s") != std::string::npos);
  CHECK(r.out.find("ratio") != std::string::npos);
  CHECK(r.out.find("threads 2") != std::string::npos);
  CHECK(r.out.find("\nq4_K ") != std::string::npos);
  CHECK(r.out.find("\nf16 ") != std::string::npos);
}

TEST_CASE("the kernel benchmark rejects an unknown or unsupported type with its name") {
  auto r = sluice::test::run_sluice(kBench + " --types q4_Q");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("unknown type 'q4_Q'") != std::string::npos);
  r = sluice::test::run_sluice(kBench + " --types iq2_xxs");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("type iq2_xxs not supported yet") != std::string::npos);
}
