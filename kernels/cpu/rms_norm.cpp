#include "kernels/rms_norm.h"

#include <cmath>

namespace sluice::kernels {

void rms_norm(std::span<const float> x, std::span<const float> weight, float eps, int64_t n,
              std::span<float> y) {
  const int64_t n_rows = n > 0 ? static_cast<int64_t>(x.size()) / n : 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x.data() + r * n;
    float* yr = y.data() + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (weight.empty()) {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * scale) * weight[i];
    }
  }
}

}  // namespace sluice::kernels
