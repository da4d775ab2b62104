// AVX2 kernels of the i-quants and ternary types (vec_dot_iq_*_avx2.cpp, compiled with -mavx2
// -mfma -mf16c). Same contracts as scalar_iq.h, bit-identical to it; x2/x4 are the multi-row
// versions (VecDotMultiFn), bit-identical per row to the one-row kernel.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::kernels::cpu::avx2 {

#define SLUICE_IQ_AVX2_DECL(type)                                                          \
  float vec_dot_##type(const void* w, const void* act, int64_t n);                         \
  void vec_dot_##type##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out); \
  void vec_dot_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out);
SLUICE_IQ_AVX2_DECL(tq1_0)
SLUICE_IQ_AVX2_DECL(tq2_0)
SLUICE_IQ_AVX2_DECL(iq4_xs)
SLUICE_IQ_AVX2_DECL(iq2_xxs)
SLUICE_IQ_AVX2_DECL(iq2_xs)
SLUICE_IQ_AVX2_DECL(iq2_s)
SLUICE_IQ_AVX2_DECL(iq3_xxs)
SLUICE_IQ_AVX2_DECL(iq3_s)
SLUICE_IQ_AVX2_DECL(iq1_s)
SLUICE_IQ_AVX2_DECL(iq1_m)
#undef SLUICE_IQ_AVX2_DECL

// The IQ panel GEMM's order (scalar_iq.h) for the eight types it covers: one row, and four
// (VecDotMultiFn; each row bit-identical to the one-row kernel and to the scalar reference).
#define SLUICE_IQ_PANEL_AVX2_DECL(type)                                    \
  float vec_dot_panel_##type(const void* w, const void* act, int64_t n); \
  void vec_dot_panel_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out);
SLUICE_IQ_PANEL_AVX2_DECL(iq2_xxs)
SLUICE_IQ_PANEL_AVX2_DECL(iq2_xs)
SLUICE_IQ_PANEL_AVX2_DECL(iq2_s)
SLUICE_IQ_PANEL_AVX2_DECL(iq3_xxs)
SLUICE_IQ_PANEL_AVX2_DECL(iq3_s)
SLUICE_IQ_PANEL_AVX2_DECL(iq4_xs)
SLUICE_IQ_PANEL_AVX2_DECL(iq1_s)
SLUICE_IQ_PANEL_AVX2_DECL(iq1_m)
#undef SLUICE_IQ_PANEL_AVX2_DECL

}  // namespace sluice::kernels::cpu::avx2
