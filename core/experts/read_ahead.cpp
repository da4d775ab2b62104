#include "core/experts/read_ahead.h"

#include <algorithm>

namespace sluice::core {

size_t order_by_picks(std::span<const uint32_t> counts, std::span<int32_t> list) {
  size_t n = 0;
  for (size_t e = 0; e < counts.size(); ++e)
    if (counts[e] > 0) list[n++] = static_cast<int32_t>(e);
  // The source reads in this order while slots last.
  std::sort(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(n), [&](int32_t a, int32_t b) {
    const uint32_t ca = counts[static_cast<size_t>(a)], cb = counts[static_cast<size_t>(b)];
    return ca != cb ? ca > cb : a < b;
  });
  return n;
}

}  // namespace sluice::core
