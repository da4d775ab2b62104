// Peak RSS under --budget on a model whose routed experts are four times the budget
// (tests/budget_model.h: 530 MiB of experts, --budget 128M), with a small stated slack for what
// is not the model's (code, libraries, stacks, io_uring rings, tokenizer), and a negative control
// that proves the bound can be seen broken: the same run with the budget bypassed
// (SLUICE_TEST_IGNORE_BUDGET=1, a test-only switch of `sluice run`: every expert in core).
#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "tests/budget_model.h"
#include "tests/test_support.h"

namespace {

using sluice::test::kBudgetTestBudget;

// What a process holds beyond the model's budgeted memory, measured at about 20 MiB on the tiny
// models (code and libraries ~12 MiB, io_uring rings and staging, thread stacks, tokenizer).
constexpr uint64_t kSlack = 32ull << 20;

std::string run_args() {
  return "run -m '" + sluice::test::budget_model().string() +
         "' --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -n 12 -c 64 -b 16 --ignore-eos "
         "--budget 128M --stats";
}

uint64_t peak_rss(const std::string& err) {
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(err, m, std::regex(R"(peak RSS (\d+) bytes)")), err);
  return std::stoull(m[1].str());
}

}  // namespace

TEST_CASE("sluice run keeps peak RSS within --budget 128M plus 32 MiB on 530 MiB of routed experts, and bypassing the budget breaks it") {
  if (sluice::test::kUnderSanitizer) {
    MESSAGE("skipped: sanitizer shadow memory is not the model's");
    return;
  }
  auto bounded = sluice::test::run_sluice(run_args());
  REQUIRE_MESSAGE(bounded.exit_code == 0, bounded.err);
  std::smatch m;
  REQUIRE(std::regex_search(bounded.err, m, std::regex(R"((\d+) evictions)")));
  CHECK(std::stoull(m[1].str()) > 0);  // the experts did not fit: the cache worked for its bound
  const uint64_t peak = peak_rss(bounded.err);

  auto bypassed = sluice::test::run_sluice(run_args(), "SLUICE_TEST_IGNORE_BUDGET=1");
  REQUIRE_MESSAGE(bypassed.exit_code == 0, bypassed.err);
  CHECK(bypassed.err.find("SLUICE_TEST_IGNORE_BUDGET is set (test-only)") != std::string::npos);
  CHECK(bypassed.out == bounded.out);  // the same tokens: only the memory differs
  const uint64_t peak_bypassed = peak_rss(bypassed.err);

  MESSAGE("budget " << kBudgetTestBudget << " + slack " << kSlack << " bytes: peak RSS " << peak
                    << " bytes; budget bypassed: " << peak_bypassed << " bytes");
  CHECK(peak <= kBudgetTestBudget + kSlack);
  CHECK(peak_bypassed > kBudgetTestBudget + kSlack);  // the control: the bound can fail
}
