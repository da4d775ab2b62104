// AVX-512 kernels (defined in *_avx512.cpp, compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni and the AVX2 flags). Same contracts as the AVX2 versions in avx2.h and bit-identical
// to them; x2/x4/x8 are the multi-row versions (VecDotMultiFn), bit-identical per row to the one-row
// kernel. Never call them without checking the CPU (dispatch.cpp does).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::kernels::cpu {
struct KeyBlockKernels;  // dispatch.h
}

namespace sluice::kernels::cpu::avx512 {

// add_scaled_f16_avx512.cpp: AVX2's order with 16-lane registers.
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
KeyBlockKernels key_block_kernels();  // key_block_attention_avx512.cpp: register-tiled

// One-row kernels: installed only where they measured faster than AVX2's.
float vec_dot_q2_k(const void* w, const void* act, int64_t n);
float vec_dot_q4_k(const void* w, const void* act, int64_t n);
float vec_dot_q6_k(const void* w, const void* act, int64_t n);
float vec_dot_iq4_xs(const void* w, const void* act, int64_t n);
float vec_dot_tq2_0(const void* w, const void* act, int64_t n);
float vec_dot_q4_k_repack(const void* w, const void* act, int64_t n);

// Multi-row kernels, bit-identical per row to the one-row kernel in the table (AVX2's or the
// AVX-512 one above).
#define SLUICE_AVX512_MULTI_DECL(type)                                                              \
  void vec_dot_##type##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out); \
  void vec_dot_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out); \
  void vec_dot_##type##_x8(const void* w, const void* act, size_t stride, int64_t n, float* out);
SLUICE_AVX512_MULTI_DECL(q2_k)
SLUICE_AVX512_MULTI_DECL(q3_k)
SLUICE_AVX512_MULTI_DECL(q4_k)
SLUICE_AVX512_MULTI_DECL(q5_k)
SLUICE_AVX512_MULTI_DECL(q6_k)
SLUICE_AVX512_MULTI_DECL(q8_0)
SLUICE_AVX512_MULTI_DECL(q4_0)
SLUICE_AVX512_MULTI_DECL(q4_1)
SLUICE_AVX512_MULTI_DECL(q5_0)
SLUICE_AVX512_MULTI_DECL(q5_1)
SLUICE_AVX512_MULTI_DECL(mxfp4)
SLUICE_AVX512_MULTI_DECL(iq4_nl_llamafile)  // llamafile's order (scalar.h)
SLUICE_AVX512_MULTI_DECL(iq4_xs)
SLUICE_AVX512_MULTI_DECL(tq2_0)
#undef SLUICE_AVX512_MULTI_DECL

// Q4_K's repacked GEMM and GEMV orders as 16-row tiled GEMMs over 1 to 4 tokens, one packing for both
// (gemm_q4_k_tile_avx512.cpp; the TileGemm contract of dispatch.h).
constexpr size_t kQ4KTileBlockBytes = 2432;
constexpr int kQ4KTileTokens = 4;
void pack_q4_k_tile(const std::byte* rows, size_t row_stride, int64_t n, std::byte* packed);
void gemm_q4_k_tile(const std::byte* packed, const void* act, size_t act_stride, int64_t n, int n_tokens, float* out,
                    size_t out_stride);
void gemv_order_q4_k_tile(const std::byte* packed, const void* act, size_t act_stride, int64_t n, int n_tokens,
                          float* out, size_t out_stride);

void vec_dot_q4_k_repack_x2(const void* w, const void* act, size_t stride, int64_t n, float* out);
void vec_dot_q4_k_repack_x4(const void* w, const void* act, size_t stride, int64_t n, float* out);

}  // namespace sluice::kernels::cpu::avx512
