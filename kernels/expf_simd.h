// expf_simd: ggml's vectorized exp (ggml_v_expf) and the ops built on it, evaluated in scalar.
//
// ggml's CPU backend does not call libm expf in its vectorized loops: ggml_vec_silu_f32 and
// ggml_vec_soft_max_f32 evaluate exp with a range reduction (n = round(x / ln 2)), a degree-5
// polynomial in FMA form and a scale by 2^n (ggml_v_expf; identical constants on AVX-512, AVX2
// and NEON). It differs from expf by about an ULP, enough to flip an activation quantization later
// on. Reproducing it makes Kimi K3's short-conv silu bit-identical to llama.cpp (checked on its
// trace). Elements past the last full SIMD chunk of a row (16 values, AVX-512) use expf, as ggml's
// scalar tail does.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

constexpr int64_t kGgmlSimdWidth = 16;  // floats per vector on the reference machine (AVX-512)

// ggml_v_expf for one value.
float expf_simd(float x);

// ggml_vec_silu_f32 over rows of `row` values: x / (1 + exp(-x)), exp from expf_simd for the full
// 16-value chunks of each row and expf for the tail. y may alias x.
void silu_simd(std::span<const float> x, int64_t row, std::span<float> y);

}  // namespace sluice::kernels
