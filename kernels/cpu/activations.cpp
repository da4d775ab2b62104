#include "kernels/activations.h"

#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels {

namespace cpu {
#include "kernels/cpu/activations_impl.h"

void silu_blocks(const float* x, float* y, size_t n) { silu_blocks_impl(x, y, n); }
void swiglu_blocks(const float* gate, const float* up, float* y, size_t n) { swiglu_blocks_impl(gate, up, y, n); }
}  // namespace cpu

void sigmoid(std::span<const float> x, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void silu(std::span<const float> x, std::span<float> y) {
  const size_t n_simd = x.size() / 16 * 16;  // ggml_v_silu lanes
  cpu::best_kernels().silu_blocks(x.data(), y.data(), n_simd);
  for (size_t i = n_simd; i < x.size(); ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> y) {
  const size_t n_simd = gate.size() / 16 * 16;  // ggml_v_silu lanes
  cpu::best_kernels().swiglu_blocks(gate.data(), up.data(), y.data(), n_simd);
  for (size_t i = n_simd; i < gate.size(); ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace sluice::kernels
