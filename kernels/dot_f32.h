// F32 dot products in the exact summation orders of llama.cpp's CPU backend on AVX-512 (the
// reference build), emulated with std::fma so results are bit-identical on any CPU:
//
//   dot_f32_ggml_vec   ggml_vec_dot_f32: 4 accumulators x 16 lanes over 64-value steps (FMA),
//                      combined (a0+a2, a1+a3, then a0+a1), lanes summed as
//                      _mm512_reduce_add_ps; the n % 64 tail added one FMA at a time.
//                      ggml uses it for one-token products and non-contiguous activations.
//   dot_f32_tinyblas   llamafile's tinyBLAS<16, __m512>: one 16-lane FMA accumulator over
//                      16-value steps, then _mm512_reduce_add_ps. ggml uses it for batches of
//                      >= 2 contiguous activation rows when n % 16 == 0.
//
// Small float differences matter after quantization: an activation that lands on the other side
// of a Q8_0/Q8_K rounding step moves logits by whole hundredths.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/matvec.h"
#include "kernels/thread_pool.h"

namespace sluice::kernels {

float dot_f32_ggml_vec(const float* x, const float* y, int64_t n);
float dot_f32_tinyblas(const float* x, const float* y, int64_t n);  // n % 16 == 0

// Y[t][n_rows] = W X[t][n_cols] for an F32 W, in the order ggml picks: tinyBLAS when
// `contiguous` (a plain mul_mat of a contiguous activation), n_tokens >= 2 and n_cols % 16 == 0;
// ggml_vec_dot_f32 otherwise (one token, permuted activations, mul_mat_id).
// The same for F16 weights (n_cols <= 8192): the activation is rounded to F16 (except on the
// tinyBLAS path when `batch_keeps_f32`, llamafile's F16 x F32 kernel on some builds), then the
// exact products are summed in the same two orders. `x_scratch` holds n_tokens * n_cols floats.
void matmul_f16_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, bool batch_keeps_f32, std::span<float> x_scratch, ThreadPool& pool);

void matmul_f32_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, ThreadPool& pool);

}  // namespace sluice::kernels
