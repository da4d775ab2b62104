// situ: Kimi K3's gated activation, replacing SwiGLU in every K3 FFN (dense, routed, shared).
//
//   situ(g, u) = [beta * tanh(g / beta) * sigmoid(g)] * [lin_beta * tanh(u / lin_beta)]
//
// g is the gate branch (w1), u the up branch (w3), element by element. sigmoid reads the raw g;
// the soft-capped beta*tanh(g/beta) multiplies it. With lin_beta <= 0 the up branch passes
// through unchanged (u). For |g| << beta this tends to silu(g) * u.
//
// Computed in float as llama.cpp's kimi_k3_situ graph does: ggml_scale by 1/beta, tanh, scale by
// beta, times sigmoid(g) = 1/(1+expf(-g)); the up branch likewise. All spans have the same length;
// y may alias an input.
#pragma once

#include <span>

namespace sluice::kernels {

void situ(std::span<const float> gate, std::span<const float> up, float beta, float lin_beta,
          std::span<float> y);

}  // namespace sluice::kernels
