// short_conv: the depthwise causal 1-D convolution in front of Kimi K3's KDA (ggml_ssm_conv).
//
// Per channel c of `n_ch` channels, with `d_conv` taps w[c][0..d_conv):
//   y[t][c] = sum_{i=0}^{d_conv-1} window_t[i] * w[c][i]
//   window_t = (x[t-d_conv+1][c], ..., x[t-1][c], x[t][c])     tap d_conv-1 = the current token
// Inputs before the batch come from the conv state. No bias, no activation (silu follows it).
//
// Layouts (all f32, row-major):
//   x      [n_tokens][n_ch]            the projected inputs of this batch
//   w      [n_ch][d_conv]              ggml ssm_conv1d weight (ne = [d_conv, 1, n_ch(, 1)])
//   state  [n_ch][d_conv - 1]          per channel the d_conv-1 previous inputs, oldest first;
//                                      zeros for a new sequence. Updated in place to the last
//                                      d_conv-1 inputs of [old state | x] (fewer than d_conv-1
//                                      tokens shift the older entries along).
//   y      [n_tokens][n_ch]            must not alias x
// The tap sum runs tap 0 first, in float with FMA, as ggml_compute_forward_ssm_conv_f32 compiles
// on the reference machine (bit-identical on llama.cpp's trace).
// No allocation: `window` is caller scratch of (d_conv - 1 + n_tokens) floats.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

void short_conv(std::span<const float> x, std::span<const float> w, std::span<float> state,
                int64_t n_tokens, int64_t n_ch, int64_t d_conv, std::span<float> y,
                std::span<float> window);

}  // namespace sluice::kernels
