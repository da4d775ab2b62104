#include "kernels/softmax.h"

#include <cmath>
#include <limits>

namespace sluice::kernels {

void softmax(std::span<float> x, float scale) {
  if (x.empty()) return;
  if (scale != 1.0f) {
    for (float& v : x) v *= scale;
  }
  float max = -std::numeric_limits<float>::infinity();
  for (float v : x) max = v > max ? v : max;
  double sum = 0.0;
  for (float& v : x) {
    v = std::exp(v - max);
    sum += static_cast<double>(v);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

}  // namespace sluice::kernels
