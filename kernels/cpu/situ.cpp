#include "kernels/situ.h"

#include <cmath>

namespace sluice::kernels {

void situ(std::span<const float> gate, std::span<const float> up, float beta, float lin_beta,
          std::span<float> y) {
  const float inv_beta = 1.0f / beta;
  const bool cap_up = lin_beta > 0.0f;
  const float inv_lin = cap_up ? 1.0f / lin_beta : 0.0f;
  for (size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    const float a = (std::tanh(g * inv_beta) * beta) * (1.0f / (1.0f + std::exp(-g)));
    const float u = cap_up ? std::tanh(up[i] * inv_lin) * lin_beta : up[i];
    y[i] = a * u;
  }
}

}  // namespace sluice::kernels
