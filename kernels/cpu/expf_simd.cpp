#include "kernels/expf_simd.h"

#include <cmath>

namespace sluice::kernels {

float expf_simd(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, static_cast<int>(n));
}

void silu_simd(std::span<const float> x, int64_t row, std::span<float> y) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t full = row / kGgmlSimdWidth * kGgmlSimdWidth;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = (i % row) < full ? expf_simd(0.0f - v) : std::exp(-v);
    y[i] = v / (1.0f + e);
  }
}

}  // namespace sluice::kernels
