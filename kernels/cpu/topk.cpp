#include "kernels/topk.h"

#include <cmath>

namespace sluice::kernels {

namespace {
// a ranks before b: larger value first, then lower index; NaN last.
bool before(float va, int32_t a, float vb, int32_t b) {
  if (std::isnan(va)) return false;
  if (std::isnan(vb)) return true;
  if (va != vb) return va > vb;
  return a < b;
}
}  // namespace

void top_k(std::span<const float> x, std::span<int32_t> out) {
  const int32_t n = static_cast<int32_t>(x.size());
  const size_t k = out.size();
  for (size_t s = 0; s < k; ++s) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; ++i) {
      bool taken = false;
      for (size_t t = 0; t < s; ++t) taken |= out[t] == i;
      if (taken) continue;
      if (best < 0 || before(x[i], i, x[best], best)) best = i;
    }
    out[s] = best;
  }
}

}  // namespace sluice::kernels
