// tests/float_compare.h: the suites' max-difference helper fails every bound on a NaN, where a
// plain std::max loop (std::max(d, NaN) is d) would pass it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/float_compare.h"

using sluice::test::max_abs_diff;
using sluice::test::RunningMax;

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
}

TEST_CASE("a NaN anywhere in either array makes the max difference fail every bound") {
  const std::vector<float> want{1.0f, 2.0f, 3.0f, 4.0f};
  CHECK(max_abs_diff(want, want) == 0);
  CHECK(max_abs_diff(want, std::vector<float>{1.0f, 2.5f, 3.0f, 4.0f}) == 0.5);
  for (size_t at = 0; at < want.size(); ++at) {
    CAPTURE(at);
    std::vector<float> got = want;
    got[at] = kNaN;
    // What the old loop gave: the NaN dropped, a bound of 0 met.
    double plain = 0;
    for (size_t i = 0; i < want.size(); ++i) plain = std::max(plain, double(std::fabs(got[i] - want[i])));
    CHECK(plain == 0);
    for (const double d : {max_abs_diff(got, want), max_abs_diff(want, got)}) {
      CHECK_FALSE(d <= 0.6);
      CHECK_FALSE(d == 0);
      CHECK_FALSE(d > 1e-3);
    }
  }
}

TEST_CASE("a NaN added to a running maximum stays whatever larger values follow") {
  RunningMax m;
  m.add(0.25);
  m.add_abs_diff(1.0, kNaN);
  m.add(7.0);
  m.add(0.0);
  CHECK(std::isnan(m.value()));
  RunningMax finite;
  for (const double x : {0.25, 7.0, 3.0}) finite.add(x);
  CHECK(finite.value() == 7.0);
}

TEST_CASE("arrays of different lengths have no max difference within any bound") {
  CHECK(std::isnan(max_abs_diff(std::vector<float>{1.0f, 2.0f}, std::vector<float>{1.0f})));
}
