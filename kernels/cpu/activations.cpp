#include "kernels/activations.h"

#include <cmath>

namespace sluice::kernels {

void sigmoid(std::span<const float> x, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void silu(std::span<const float> x, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> y) {
  for (size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace sluice::kernels
