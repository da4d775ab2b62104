// matvec / matmul over quantized weight matrices.
//
// A WeightMatrix is a 2-D view of a ggml tensor: n_rows rows of n_cols values (ne[0] = n_cols,
// ne[1] = n_rows), each row `row_stride` bytes apart. y = W x computes y[r] = dot(row r, x).
// For expert tensors ([n_embd, n_ff, n_expert]) one expert is a WeightMatrix at an offset.
//
// The activation is quantized once per call into `scratch` (vec_dot_type of the weights), then
// rows are split over the thread pool. Results do not depend on the number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/ggml_type.h"
#include "kernels/thread_pool.h"

namespace sluice::kernels {

// Batched products take the activation rows in groups of this many tokens (ggml's repacked GEMM
// order) and the rows left over one at a time (its GEMV order), which round differently: a batch
// of whole groups gives every token the bits a larger batch of whole groups gives it.
constexpr int kGemmTokenGroup = 4;

// How llama.cpp's CPU backend (x86, REPACK on) multiplies a matrix it repacks (ggml_repacks), which
// decides the float summation order of every dot:
//  - mul_mat: a plain matrix product; tokens in groups of 4 go through the repacked GEMM, which
//    accumulates per pair of 32-value sub-blocks; the n % 4 tokens left (and any call with fewer
//    than 4 tokens) go through the GEMV, which accumulates per 256-value super-block.
//  - mul_mat_id: an expert of an expert tensor; every token goes through the GEMV.
// The i-quants that llama.cpp's IQ panel GEMM takes (cpu::KernelTable::vec_dot_panel: IQ1_S,
// IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS) are not repacked at load but packed 8
// rows at a time per call: a mul_mat of at least 8 tokens, or an expert (mul_mat_id) with at least
// 8 rows routed to it, sums every token in the panel's order; fewer tokens take vec_dot's.
enum class GgmlRepack : uint8_t { none, mul_mat, mul_mat_id };

struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  const std::byte* data = nullptr;
  int64_t n_cols = 0;     // ne[0]: values per row
  int64_t n_rows = 0;     // ne[1]
  size_t row_stride = 0;  // bytes between rows (= ggml_row_bytes(type, n_cols) when dense)
  // Set where llama.cpp's CPU backend repacks this matrix (see ggml_repacks): its dots are then
  // summed in the order of ggml's repacked GEMV/GEMM, so that logits match llama.cpp's to the bit.
  GgmlRepack repack = GgmlRepack::none;
};

// Whether llama.cpp's CPU backend on x86 (AVX2 and up, REPACK on, its default) repacks a weight of
// this type with n_rows rows, for a 2-D matrix used by mul_mat or an expert tensor used by
// mul_mat_id (a 3-D tensor used by plain mul_mat, such as MLA's attn_k_b/attn_v_b, is never
// repacked). True only where sluice emulates the repacked order: Q4_K (AVX2) and Q2_K (AVX-512,
// the reference build's CPU) with n_rows % 8 == 0, and the IQ panel's types with n_rows % 8 == 0
// (see GgmlRepack), and IQ4_NL with n_rows % 8 == 0 (its GEMV and GEMM sum alike). llama.cpp also
// repacks Q4_0 and MXFP4 (AVX2); those still use vec_dot's order here. An IQ4_NL matrix it does
// not repack (a 3-D slice such as MLA's attn_k_b) takes llamafile's order from 2 tokens (a run of
// 2 with `runs`), vec_dot's for one; an expert of such a tensor would too (ggml's mul_mat_id
// never takes llamafile), which no shipped model has.
bool ggml_repacks(GgmlType type, int64_t n_rows);

// Whether the summation order of w's dots depends on how many tokens a call (or a run) has: a
// matrix repacked for mul_mat (GEMM for groups of 4), or an IQ panel type that ggml_repacks lists
// (mul_mat or mul_mat_id: the panel from 8 tokens), or an IQ4_NL matrix not repacked (llamafile
// from 2 tokens). Such a product with several sequences in one
// batch must pass their runs to matmul.
bool order_depends_on_tokens(const WeightMatrix& w);

// Scratch bytes needed by matvec/matmul for this weight type, row length and token count on a
// pool of n_threads: the activations quantized to vec_dot_type and, for a batch that takes a
// tiled GEMM (kernels/cpu/dispatch.h), one packed row tile per thread, so no matmul allocates and
// the budget counts every byte. Scratch must be at least 4-byte aligned (Q8_K's f32 scale); size
// it once at load for the largest matrix and batch.
//
// Errors: Error(invalid_argument) naming the size when x, y or scratch is too small (scratch
// sized for fewer threads than the pool runs included), or when the row length is not a multiple
// of the block size; Error(unsupported) for a type without kernels.
size_t matmul_scratch_bytes(GgmlType weight_type, int64_t n_cols, int64_t n_tokens, unsigned n_threads);

// y[n_rows] = W x[n_cols]
void matvec(const WeightMatrix& w, std::span<const float> x, std::span<float> y, std::span<std::byte> scratch,
            ThreadPool& pool);

// Y[t][n_rows] = W X[t][n_cols] for t in [0, n_tokens); X and Y are row-major.
// `runs`, when given, splits the tokens into sequences (run r is tokens [runs[r], runs[r+1]),
// from 0 to n_tokens): a matrix llama.cpp repacks for mul_mat then sums each token in the order
// its sequence alone would get (the GEMM's for the leading whole groups of 4 of its run, the
// GEMV's for the rest; for an IQ panel type the panel's for a run of at least 8 tokens, for
// mul_mat and mul_mat_id alike, vec_dot's for a shorter one), so a mixed batch gives each
// sequence its single-run results.
void matmul(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
            std::span<std::byte> scratch, ThreadPool& pool, std::span<const int64_t> runs = {});

// One token through every slice of a 3-D weight: y_s = W_s x_s for s < n_slices, W_s the matrix
// `w` moved by s * slice_stride bytes, x_s = x + s * x_stride and y_s = y + s * y_stride (in
// floats). Each y value is what matvec(W_s, x_s) gives (one vec_dot per row, in vec_dot's order);
// only the work is shared out differently: every slice's rows in one pool hand-off. For decode's
// per-head products (MLA's attn_k_b/attn_v_b: 64 heads of a few microseconds each, twice per
// layer), where a hand-off per head cost more than its dots. Plain orders only: w.repack must be
// none and the type quantized (F32/F16 take other paths); Error(invalid_argument) otherwise.
// scratch: matvec_slices_scratch_bytes.
size_t matvec_slices_scratch_bytes(GgmlType weight_type, int64_t n_cols, int64_t n_slices);
void matvec_slices(const WeightMatrix& w, size_t slice_stride, int64_t n_slices, const float* x, size_t x_stride,
                   float* y, size_t y_stride, std::span<std::byte> scratch, ThreadPool& pool);

}  // namespace sluice::kernels
