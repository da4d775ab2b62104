// Scalar reference kernels of the i-quants (IQ1_S .. IQ4_XS) and the ternary types (TQ1_0,
// TQ2_0). Same calling convention as scalar.h (see dispatch.h). Dequantization is ggml's
// to_float bit for bit; the dot products take Q8_K activations and sum in the order of ggml's x86
// kernels (vec_dot_iquants.cpp says how). There are no weight quantizers for these types: ggml's
// need its codebook search and an importance matrix.
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

void dequantize_tq1_0(const void* src, float* dst, int64_t n);
void dequantize_tq2_0(const void* src, float* dst, int64_t n);
void dequantize_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_iq3_xxs(const void* src, float* dst, int64_t n);
void dequantize_iq3_s(const void* src, float* dst, int64_t n);
void dequantize_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_iq1_m(const void* src, float* dst, int64_t n);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n);

float vec_dot_tq1_0(const void* w, const void* act, int64_t n);
float vec_dot_tq2_0(const void* w, const void* act, int64_t n);
float vec_dot_iq2_xxs(const void* w, const void* act, int64_t n);
float vec_dot_iq2_xs(const void* w, const void* act, int64_t n);
float vec_dot_iq2_s(const void* w, const void* act, int64_t n);
float vec_dot_iq3_xxs(const void* w, const void* act, int64_t n);
float vec_dot_iq3_s(const void* w, const void* act, int64_t n);
float vec_dot_iq1_s(const void* w, const void* act, int64_t n);
float vec_dot_iq1_m(const void* w, const void* act, int64_t n);
float vec_dot_iq4_xs(const void* w, const void* act, int64_t n);

}  // namespace sluice::kernels::cpu
