// AVX2 kernels (defined in *_avx2.cpp, compiled with -mavx2 -mfma -mf16c). Same contracts as the
// scalar versions in scalar.h; never call them without checking the CPU (dispatch.cpp does).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::kernels::cpu {
struct KeyBlockKernels;  // dispatch.h
}

namespace sluice::kernels::cpu::avx2 {

void dequantize_f16(const void* src, float* dst, int64_t n);
void add_scaled_f16(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                    const float* const* weight, float* const* out, int n_out);
void dot_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                  int n_q, float* const* out);
// tinyBLAS-order attention products on an F16 KV cache (see dispatch.h).
void dot_f16_rows_tinyblas(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                           int n_q, float* const* out);
void fma_f16_lanes(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n,
                   const float* const* weight, float* const* lanes, int n_out, float* scratch);
void silu_blocks(const float* x, float* y, size_t n);
KeyBlockKernels key_block_kernels();  // key_block_attention_avx2.cpp
void swiglu_blocks(const float* gate, const float* up, float* y, size_t n);

void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);

float vec_dot_f32(const void* w, const void* act, int64_t n);
float vec_dot_f16(const void* w, const void* act, int64_t n);
float vec_dot_bf16(const void* w, const void* act, int64_t n);
float vec_dot_q4_0(const void* w, const void* act, int64_t n);
float vec_dot_q4_1(const void* w, const void* act, int64_t n);
float vec_dot_q5_0(const void* w, const void* act, int64_t n);
float vec_dot_q5_1(const void* w, const void* act, int64_t n);
float vec_dot_q8_0(const void* w, const void* act, int64_t n);
float vec_dot_mxfp4(const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl(const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl_llamafile(const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl_repack(const void* w, const void* act, int64_t n);
float vec_dot_q2_k(const void* w, const void* act, int64_t n);
float vec_dot_q2_k_repack(const void* w, const void* act, int64_t n);
float vec_dot_q2_k_repack_gemm(const void* w, const void* act, int64_t n);
float vec_dot_q3_k(const void* w, const void* act, int64_t n);
float vec_dot_q4_k(const void* w, const void* act, int64_t n);
float vec_dot_q4_k_repack(const void* w, const void* act, int64_t n);
float vec_dot_q4_k_repack_gemm(const void* w, const void* act, int64_t n);
float vec_dot_q5_k(const void* w, const void* act, int64_t n);
float vec_dot_q6_k(const void* w, const void* act, int64_t n);

// Multi-row versions (VecDotMultiFn): 2 or 4 activation rows per weight row, bit-identical per row.
void vec_dot_q4_k_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q4_k_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q4_k_repack_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q4_k_repack_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q4_k_repack_gemm_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q4_k_repack_gemm_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q8_0_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q8_0_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q4_0_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q4_0_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q5_0_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q5_0_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_mxfp4_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_mxfp4_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_iq4_nl_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_iq4_nl_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_iq4_nl_repack_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_iq4_nl_repack_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_iq4_nl_llamafile_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_iq4_nl_llamafile_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q2_k_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q2_k_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q2_k_repack_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q2_k_repack_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q2_k_repack_gemm_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q2_k_repack_gemm_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q3_k_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q3_k_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q3_k_x8(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q6_k_x2(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
void vec_dot_q6_k_x4(const void* w, const void* act, size_t act_stride, int64_t n, float* out);

}  // namespace sluice::kernels::cpu::avx2
