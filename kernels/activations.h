// Element-wise activations, written as ggml's scalar forms so results match its reference path:
//   sigmoid(x) = 1 / (1 + expf(-x))
//   silu(x)    = x / (1 + expf(-x))
//   swiglu(g, u) = silu(g) * u        (ggml_swiglu_split: gate first, up second)
// All spans have the same length; y may alias an input.
#pragma once

#include <span>

namespace sluice::kernels {

void sigmoid(std::span<const float> x, std::span<float> y);
void silu(std::span<const float> x, std::span<float> y);
void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> y);

}  // namespace sluice::kernels
