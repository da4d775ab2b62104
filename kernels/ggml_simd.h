// ggml_simd: ggml's vectorized float arithmetic, evaluated in scalar so that results are
// bit-identical to llama.cpp's CPU backend on the reference machine (x86-64 with AVX-512) whatever
// SIMD the host has. Used where a few-ULP difference matters: Kimi K3's activations are quantized
// (Q8_0/Q8_K/F16) before every matmul, and a value that lands on the other side of a rounding
// boundary moves the logits by up to ~1 on the tiny reference model.
//
//   expf_simd          ggml_v_expf: range reduction n = round(x / ln 2), degree-5 polynomial in
//                      FMA form, scale by 2^n (same constants on AVX-512, AVX2 and NEON)
//   silu_simd          ggml_vec_silu_f32: x / (1 + exp(-x)), expf_simd on each row's full 16-value
//                      chunks, expf on the tail
//   dot_f32_ggml       ggml_vec_dot_f32 (AVX-512): 4 accumulators x 16 lanes, FMA, steps of 64,
//                      pairwise then lane-tree reduction, tail in double
//   dot_f32_tinyblas   llamafile_sgemm (tinyBLAS, AVX-512) for one output: 16 lanes, FMA, steps of
//                      16, _mm512_reduce_add_ps order; n must be a multiple of 16
//   softmax_simd       ggml_soft_max_ext on a row of n_kv scores (masked entries already -inf):
//                      scale, max, expf_simd per 16-chunk with each chunk's sum reduced as
//                      _mm512_reduce_add_ps and accumulated in double, then times (float)(1/sum)
// All were checked against llama.cpp's F32 trace of the tiny Kimi K3 model (KDA scan, short conv,
// MLA softmax and attention output bit-identical).
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

constexpr int64_t kGgmlSimdWidth = 16;  // floats per vector on the reference machine (AVX-512)

float expf_simd(float x);
void silu_simd(std::span<const float> x, int64_t row, std::span<float> y);
float dot_f32_ggml(const float* x, const float* y, int64_t n);
float dot_f32_tinyblas(const float* x, const float* y, int64_t n);
// In place; x.size() must be a multiple of kGgmlSimdWidth (pad with -inf).
void softmax_simd(std::span<float> x, float scale);

}  // namespace sluice::kernels
