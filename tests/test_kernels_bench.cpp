// sluice bench kernels: runs end to end on a small matrix and rejects bad options.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "tests/test_support.h"
#if SLUICE_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

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

TEST_CASE("the kernel benchmark runs the i-quants and ternary types, which have no weight quantizer") {
  const auto r = sluice::test::run_sluice(kBench + " --mb 1 --seconds 0.01 --threads 1 --types iq1_s,tq1_0,iq4_xs");
  REQUIRE(r.exit_code == 0);
  for (const char* name : {"\niq1_s ", "\ntq1_0 ", "\niq4_xs "}) CHECK(r.out.find(name) != std::string::npos);
}

TEST_CASE("the kernel benchmark rejects an unknown or unsupported type with its name") {
  auto r = sluice::test::run_sluice(kBench + " --types q4_Q");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("unknown type 'q4_Q'") != std::string::npos);
  r = sluice::test::run_sluice(kBench + " --types i32");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("type i32 not supported yet") != std::string::npos);
}

TEST_CASE("cuda bench kernels --gpu prints GB/s against the HBM peak, or says why it cannot") {
  const auto r = sluice::test::run_sluice(kBench + " --gpu --gpu-mb 8 --iters 3 --types q4_K,f16,mxfp4,iq2_xxs,tq1_0");
  bool have_gpu = false;
#if SLUICE_HAVE_CUDA
  have_gpu = sluice::kernels::cuda::probe().has_value();
#endif
  if (!have_gpu) {
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("--gpu: ") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
    return;
  }
  MESSAGE(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("HBM peak") != std::string::npos);
  CHECK(r.out.find("device copy") != std::string::npos);
  CHECK(r.out.find("%peak") != std::string::npos);
  CHECK(r.out.find("\nq4_K ") != std::string::npos);
  CHECK(r.out.find("\nmxfp4 ") != std::string::npos);
  CHECK(r.out.find("\niq2_xxs ") != std::string::npos);  // no weight quantizer: random blocks
  CHECK(r.out.find("\ntq1_0 ") != std::string::npos);
}
