// Quantized block formats: dequantize, quantize and dot products, exactly as ggml defines them.
//
// Weight rows are stored in ggml's block formats (see common/ggml_type.h for block geometry).
// A dot product never dequantizes the weights: the f32 activation row is first quantized to the
// weight type's `vec_dot_type` (ggml's pairing: k-quants meet Q8_K; Q4_0/Q5_0/Q8_0/MXFP4/IQ4_NL
// meet Q8_0; Q4_1/Q5_1 meet Q8_1; F16 meets activations rounded to F16, BF16 to BF16, F32 to
// F32), then integer dot products are scaled per block. This is what makes sluice's logits agree
// with llama.cpp's.
//
// Activation quantization rounds as ggml's x86 SIMD path does, so the scalar reference and the
// SIMD paths produce identical quantized bytes.
//
// All functions work on caller-owned memory, allocate nothing and keep no state. `n` is the
// number of values in the row; it must be a multiple of the type's block size. Rows of block
// types need only the alignment of their fields (2 bytes; 4 for Q8_K activations).
//
// Implementation: kernels/cpu/dispatch.h holds one table of function pointers per ISA. The
// scalar table (kernels/cpu/*.cpp without a suffix) is the reference; the AVX2 table
// (kernels/cpu/*_avx2.cpp) overrides entries and is chosen once at first use when the CPU has
// AVX2+FMA+F16C, so one binary runs on any x86-64. Guarantees, each proven by a test:
//   - dequantize_row reproduces ggml's to_float bit for bit (SHA-256 against ggml's output,
//     tests/test_kernels_dequant.cpp);
//   - activation quantization is bit-identical between scalar and SIMD, and matches ggml's x86
//     rounding (tests/test_kernels_vec_dot.cpp);
//   - vec_dot is within 1e-5 relative of ggml's CPU result on the reference rows, and SIMD is
//     within normalized MSE 1e-10 of scalar (same file);
//   - the reference weight quantizers' RMS error is at most 1.25x ggml's (same file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/ggml_type.h"

namespace sluice::kernels {

// Weight types the kernels compute on (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K,
// MXFP4, IQ4_NL, and the i-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS and
// ternary TQ1_0, TQ2_0, which meet Q8_K and have no weight quantizer). Everything else (integer
// types, F64): throw via require_supported.
bool is_supported(GgmlType type);
// Throws Error(unsupported) "type X not supported yet (tensor 'name')".
void require_supported(GgmlType type, std::string_view tensor_name);

// The activation format a weight type's dot product consumes.
GgmlType vec_dot_type(GgmlType weight_type);

// dst[0..n) = values of the n-value row at src.
void dequantize_row(GgmlType type, const std::byte* src, float* dst, int64_t n);

// Quantizes an f32 row to `type` (activation formats Q8_0, Q8_1, Q8_K, F16, BF16, F32, and the
// reference weight quantizers for every supported weight type). dst must hold
// ggml_row_bytes(type, n) bytes. The weight quantizers fit each block's scale by a small
// least-squares search: valid blocks with ggml-like error, not llama-quantize's exact output.
// Throws Error(unsupported) for a type without a quantizer.
void quantize_row(GgmlType type, const float* src, std::byte* dst, int64_t n);

// dot(weight row, activation row) where act is already quantized to vec_dot_type(weight_type).
// Integer dot products per block, then the block scales, in f32, as ggml's CPU backend does.
float vec_dot(GgmlType weight_type, const std::byte* weight_row, const std::byte* act, int64_t n);

}  // namespace sluice::kernels
