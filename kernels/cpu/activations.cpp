#include "kernels/activations.h"

#include <cmath>

#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels {

void sigmoid(std::span<const float> x, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void silu(std::span<const float> x, std::span<float> y) {
  const size_t n_simd = x.size() / 16 * 16;
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = x[i] / (1.0f + (i < n_simd ? detail::ggml_v_expf(0.0f - x[i]) : std::exp(-x[i])));
}

void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> y) {
  const size_t n_simd = gate.size() / 16 * 16;  // ggml_v_silu lanes
  size_t i = 0;
  for (; i < n_simd; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + detail::ggml_v_expf(0.0f - g)) * up[i];
  }
  for (; i < gate.size(); ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace sluice::kernels
