// res_mix: Kimi K3's cross-layer residual mixing (llama.cpp kimi_k3 res_mix + ggml_dsv4_hc_pre).
//
// For one token, with candidates x_0 .. x_{n-1} (the banked checkpoints, oldest first) and the
// current stream x_n, and a learned score vector w [n_embd]:
//   s_i = sum_e rms(x_i)[e] * w[e]        rms without weight: x / sqrt(mean(x^2) + eps)
//   p   = softmax(s_0 .. s_n)             max-subtracted, f32
//   out = (sum_{i<n} p_i * x_i) + p_n * x_n      RAW (un-normalized) values are summed, the
//                                               stack in order first, the current stream last
// With no checkpoints (n == 0) the result is x_n itself and p = [1].
//
// `candidates` holds n+1 pointers to [n_embd] rows, current stream last; `probs` receives the
// n+1 probabilities (llama.cpp's res_probs). out may alias the current stream but no checkpoint.
// Bit-exact with llama.cpp's graph (checked on its trace): rms_norm (sum of squares in double),
// ggml_mul by w (float products), ggml_sum_rows (double sum, rounded to float), ggml_soft_max; the
// weighted sum without FMA, checkpoints in order, then + p_n * x_n.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

void res_mix(std::span<const float* const> candidates, std::span<const float> w, float eps,
             std::span<float> probs, std::span<float> out);

}  // namespace sluice::kernels
