// softmax: ggml's soft_max_ext on one row, in place.
//
//   x[i] *= scale                       (ggml_vec_scale_f32)
//   m     = max_i x[i]
//   e[i]  = expf(x[i] - m)              (float)
//   sum   = sum_i (double)e[i]          accumulated in double, as ggml_vec_soft_max_f32
//   x[i]  = e[i] * (float)(1.0 / sum)
//
// Masked (causal) positions are simply left out of the row: ggml adds -inf there, which
// contributes exp(-inf) = 0 to the sum and 0 to every weighted sum afterwards.
#pragma once

#include <span>

namespace sluice::kernels {

void softmax(std::span<float> x, float scale = 1.0f);

}  // namespace sluice::kernels
