// NaN-aware maxima for the suites' tolerance checks. std::max(m, NaN) is m, so a plain max loop
// drops a NaN and a bound check on its result passes on NaN logits. Here a NaN anywhere (or an
// infinite value on both sides, whose difference is NaN) makes the result NaN, and every
// comparison with a NaN (<=, <, ==, >) is false: CHECK(d <= bound), CHECK(d == 0) and
// CHECK(d > bound) all fail. Every max-difference in tests/ goes through here.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

namespace sluice::test {

// The largest value added; NaN from the first NaN on (it stays NaN whatever follows).
class RunningMax {
 public:
  void add(double x) {
    if (!std::isnan(max_) && !(x <= max_)) max_ = x;  // a NaN x fails `x <= max_` and sticks
  }
  void add_abs_diff(double a, double b) { add(std::fabs(a - b)); }
  double value() const { return max_; }

 private:
  double max_ = 0;
};

// max over i of |a[i] - b[i]| in double; NaN when the lengths differ or any compared value is NaN.
inline double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
  RunningMax m;
  for (size_t i = 0; i < a.size(); ++i) m.add_abs_diff(a[i], b[i]);
  return m.value();
}

}  // namespace sluice::test
