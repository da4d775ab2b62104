// Element-wise activations, as ggml's CPU backend computes them on an AVX-512 machine (the
// reference build):
//   sigmoid(x) = 1 / (1 + expf(-x))                (scalar libm expf, as ggml_vec_sigmoid_f32)
//   silu(x)    = x / (1 + exp(-x))
//   swiglu(g, u) = silu(g) * u        (ggml_swiglu_split: gate first, up second)
// For silu/swiglu, exp of every full 16-value block is ggml's vectorized ggml_v_expf (emulated
// exactly in scalar code, cpu/expf_ggml.h) and libm expf for the tail, as ggml does.
// All spans have the same length; y may alias an input.
#pragma once

#include <span>

namespace sluice::kernels {

void sigmoid(std::span<const float> x, std::span<float> y);
void silu(std::span<const float> x, std::span<float> y);
void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> y);

}  // namespace sluice::kernels
