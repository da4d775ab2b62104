// Small element-wise vector ops on caller-owned buffers (ggml_add, ggml_mul, ggml_scale).
// y may alias a or b. All spans have the same length.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

void add(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a + b
void mul(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a * b
void scale(std::span<const float> x, float s, std::span<float> y);                 // y = x * s
// y += x * s (one rounding for the product, one for the sum)
void add_scaled(std::span<const float> x, float s, std::span<float> y);
// outs[g][i] += weights[g] * v[i] for every g, v an F16 row (ggml's bits), each product and sum
// rounded as add_scaled's are: one widening of v serves all the outputs (attention's heads that
// share a value row). Every outs[g] holds v.size() floats.
void add_scaled_f16_rows(std::span<const uint16_t> v, std::span<const float> weights, std::span<float* const> outs);

}  // namespace sluice::kernels
