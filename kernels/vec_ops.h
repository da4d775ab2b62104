// Small element-wise vector ops on caller-owned buffers (ggml_add, ggml_mul, ggml_scale).
// y may alias a or b. All spans have the same length.
#pragma once

#include <span>

namespace sluice::kernels {

void add(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a + b
void mul(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a * b
void scale(std::span<const float> x, float s, std::span<float> y);                 // y = x * s
// y += x * s (one rounding for the product, one for the sum)
void add_scaled(std::span<const float> x, float s, std::span<float> y);

}  // namespace sluice::kernels
