// Scalar reference kernels, one set per ggml type. See dispatch.h for the calling convention.
// These follow ggml's reference code operation by operation (same float evaluation order where
// ggml defines the bits, e.g. dequantization and activation quantization).
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

// ---- dequantize: ggml's to_float, bit for bit ----
void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void dequantize_mxfp4(const void* src, float* dst, int64_t n);
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_q2_k(const void* src, float* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);

// ---- activation formats: rounding as ggml's x86 SIMD path ----
void quantize_f32(const float* src, void* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

// ---- reference weight quantizers (valid blocks with a small error search; not llama-quantize) ----
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void quantize_mxfp4(const float* src, void* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);

// ---- dot products: weight row . activation row (in vec_dot_type) ----
float vec_dot_f32(const void* w, const void* act, int64_t n);
float vec_dot_f16(const void* w, const void* act, int64_t n);
float vec_dot_bf16(const void* w, const void* act, int64_t n);
float vec_dot_q4_0(const void* w, const void* act, int64_t n);
float vec_dot_q4_1(const void* w, const void* act, int64_t n);
float vec_dot_q5_0(const void* w, const void* act, int64_t n);
float vec_dot_q5_1(const void* w, const void* act, int64_t n);
float vec_dot_q8_0(const void* w, const void* act, int64_t n);
float vec_dot_mxfp4(const void* w, const void* act, int64_t n);
// IQ4_NL in llama.cpp's three x86 orders: vec_dot (ggml_vec_dot_iq4_nl_q8_0: even and odd
// blocks in two 8-lane accumulators, one fma per block each, added and reduced at the end), the
// order of llamafile's tinyBLAS (one 8-lane accumulator, reduced at the end), which a mul_mat of
// a matrix it does not repack takes from 2 tokens, and the order of its repacked iq4_nl_8x8
// GEMV/GEMM (each block's integer sum into one float by one fma, blocks in order).
float vec_dot_iq4_nl(const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl_llamafile(const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl_repack(const void* w, const void* act, int64_t n);
float vec_dot_q2_k(const void* w, const void* act, int64_t n);
float vec_dot_q3_k(const void* w, const void* act, int64_t n);
float vec_dot_q4_k(const void* w, const void* act, int64_t n);
float vec_dot_q4_k_repack(const void* w, const void* act, int64_t n);
float vec_dot_q4_k_repack_gemm(const void* w, const void* act, int64_t n);
float vec_dot_q2_k_repack(const void* w, const void* act, int64_t n);
float vec_dot_q2_k_repack_gemm(const void* w, const void* act, int64_t n);
float vec_dot_q5_k(const void* w, const void* act, int64_t n);
float vec_dot_q6_k(const void* w, const void* act, int64_t n);

// ---- out[g][i] += weight[g][j] * v_j[i] over F16 rows j (see AddScaledF16Fn) ----
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
void swiglu_blocks(const float* gate, const float* up, float* y, size_t n);

}  // namespace sluice::kernels::cpu
