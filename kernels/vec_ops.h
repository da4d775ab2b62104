// Small element-wise vector ops on caller-owned buffers (ggml_add, ggml_mul, ggml_scale).
// y may alias a or b. All spans have the same length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::kernels {

void add(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a + b
void mul(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a * b
void scale(std::span<const float> x, float s, std::span<float> y);                 // y = x * s
// y += x * s (one rounding for the product, one for the sum)
void add_scaled(std::span<const float> x, float s, std::span<float> y);
// For j = 0 .. n_rows-1 in order: outs[g][i] += weights[g][j] * v_j[i] for every g, v_j the F16
// row of `n` values at rows + j * row_stride (ggml's bits), each product and sum rounded as
// add_scaled's are. The rows are widened once for all the outputs (attention's heads that share
// a value row), and the outputs stay in registers across a tile of rows. Every outs[g] holds n
// floats and every weights[g] n_rows; weights.size() == outs.size().
void add_scaled_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                         std::span<const float* const> weights, std::span<float* const> outs);
// out[h][j] = vec_dot(F16, row j, q[h], n) for every h, row j the F16 row of `n` values at rows +
// j * row_stride and q[h] an F16 activation row: the same bits as one vec_dot per pair, with each
// row widened once for all of q (attention's heads that share a key row). Every out[h] holds
// n_rows floats; q.size() == out.size().
void dot_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                  std::span<const uint16_t* const> q, std::span<float* const> out);

}  // namespace sluice::kernels
