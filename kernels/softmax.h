// softmax: ggml's soft_max_ext on one row, in place.
//
//   x[i] *= scale                       (ggml_vec_scale_f32)
//   m     = max_i x[i]
//   e[i]  = exp(x[i] - m)               (float; ggml_v_expf on full 16-value blocks, libm
//                                        expf on the tail, as ggml on AVX-512)
//   sum   = sum (double)(block sums)    each 16-block summed as _mm512_reduce_add_ps, then
//                                        accumulated in double with the tail values
//   x[i]  = e[i] * (float)(1.0 / sum)
//
// Masked (causal) positions are simply left out of the row: ggml adds -inf there, which
// contributes exp(-inf) = 0 to the sum and 0 to every weighted sum afterwards.
#pragma once

#include <span>

namespace sluice::kernels {

void softmax(std::span<float> x, float scale = 1.0f);

}  // namespace sluice::kernels
