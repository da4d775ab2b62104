// rms_norm: y = x / sqrt(mean(x^2) + eps) * weight, row by row, as ggml computes it.
//
// ggml (ggml_compute_forward_rms_norm_f32 followed by ggml_mul with the norm weight):
//   sum   = sum_i (double)(x[i] * x[i])      squares in float, accumulated in double
//   mean  = (float)(sum / n)
//   scale = 1.0f / sqrtf(mean + eps)
//   y[i]  = (x[i] * scale) * w[i]            two float roundings, in this order
// Keeping this exact order makes the result bit-identical to ggml's scalar path.
//
// x and y are [n_rows][n] row-major; they may alias (in place). `weight` is [n], or empty for a
// plain normalization.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

void rms_norm(std::span<const float> x, std::span<const float> weight, float eps, int64_t n,
              std::span<float> y);

}  // namespace sluice::kernels
