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

// The same dots in the order of llama.cpp's IQ panel GEMM (ggml-cpu/iqp.cpp, a part of the
// reference build that upstream ggml does not have), which its CPU backend takes with AVX2 for a
// mul_mat of at least 8 activation rows, and per expert of a mul_mat_id with at least 8 rows
// routed to it (KernelTable::vec_dot_panel says when sluice does): per super-block one exact
// integer sum of sub-block scale x weight x activation, then acc = fma(float(sum), dfac * y.d,
// acc), with dfac = x.d / 8 (IQ2_*, and the IQ1 types, whose weights count 8 * grid + delta),
// x.d / 4 (IQ3_XXS) or x.d (IQ3_S, IQ4_XS).
float vec_dot_panel_iq2_xxs(const void* w, const void* act, int64_t n);
float vec_dot_panel_iq2_xs(const void* w, const void* act, int64_t n);
float vec_dot_panel_iq2_s(const void* w, const void* act, int64_t n);
float vec_dot_panel_iq3_xxs(const void* w, const void* act, int64_t n);
float vec_dot_panel_iq3_s(const void* w, const void* act, int64_t n);
float vec_dot_panel_iq1_s(const void* w, const void* act, int64_t n);
float vec_dot_panel_iq1_m(const void* w, const void* act, int64_t n);
float vec_dot_panel_iq4_xs(const void* w, const void* act, int64_t n);

}  // namespace sluice::kernels::cpu
