// Attention over keys stored in blocks of 16 cells, for the prompt forms sluice computes in its
// own order (MLA's decompressed form, core/llama/attention_mla_decompressed.cpp): llama.cpp has no
// such form, so nothing here follows ggml's order. The SIMD lanes run across independent outputs
// (16 cells of a key block, 16 channels of a value row), never along a sum: every score, every
// decompressed key or value and every weighted sum is one chain of fused multiply-adds in index
// order, with no horizontal reduction. That makes the arithmetic the same at every level, so the
// scalar, AVX2 and AVX-512 tables give the same bits, and it is what lets a prompt's attention run
// at the FMA units' rate (a dot of 192 values no longer ends in 15 lane additions).
//
// Layouts:
//   key blocks: block b (cells 16b .. 16b+15) holds `d` rows of 16 F16 values at
//     kt + b * kt_block_stride (in uint16 units): row i, lane c is channel i of cell 16b + c.
//   input blocks (for the decompression): block b holds n_in rows of 16 floats, lt + b * n_in * 16:
//     row l, lane c is input l of cell 16b + c (the cells' input rows, transposed).
//   weights (for the decompression): wt[l * wt_stride + i] is output i's weight on input l.
//   value rows: cell j's `d` F16 values at v + j * v_stride (uint16 units).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::kernels {

inline constexpr int64_t kKeyBlockCells = 16;

// Keys from inputs: for blocks b < n_blocks, rows i < d, lanes c:
//   kt block b row i lane c = f16(acc), acc = fma(wt[l][i], lt block b row l lane c, acc) for l in order from +0.
void decompress_key_blocks(const float* lt, int64_t n_blocks, int64_t n_in, const float* wt, size_t wt_stride,
                           int64_t d, uint16_t* kt, size_t kt_block_stride);
// Values from inputs: for cells j < n_cells and channels i < d (d % 16 == 0):
//   v[j * v_stride + i] = f16(acc), acc = fma(input l of cell j, wt[l][i], acc) for l in order from +0.
void decompress_value_rows(const float* lt, int64_t n_cells, int64_t n_in, const float* wt, size_t wt_stride,
                           int64_t d, uint16_t* v, size_t v_stride);
// Scores: out[r][16b + c] = scale * acc, acc = fma(kt block b row i lane c, q[r][i], acc) for i < d in
// order from +0, for every block b < n_blocks and row r; q.size() == out.size(), each out[r] holds
// 16 * n_blocks floats.
void key_block_scores(const uint16_t* kt, size_t kt_block_stride, int64_t n_blocks, int64_t d,
                      std::span<const float* const> q, float scale, std::span<float* const> out);
// One chunk of a row's scores joins its running softmax. `max` is the row's running maximum
// (-inf before its first chunk) and `lanes` the 16 lanes of its running sum of exponentials, where
// score j of the chunk adds to lane j % 16 (chunks start at multiples of 16 cells). Sets
// m = max(max, s[0..n)); returns alpha = exp(max - m) (0 for the first chunk), the factor by which
// the caller scales its running outputs; scales the lanes by it, replaces each s[j] by
// e_j = exp(s[j] - m) and adds e_j to its lane in order of j; max becomes m. exp is ggml_v_expf's
// (cpu/expf_ggml.h). The row's softmax weights are then e_j over the sum of the lanes
// (reduce_key_block_lanes).
float softmax_chunk(std::span<float> s, float& max, std::span<float, 16> lanes);
// The sum of a row's 16 lanes, in _mm512_reduce_add_ps's order.
float reduce_key_block_lanes(std::span<const float, 16> lanes);
// Weighted values: out[r][i] = acc, acc = fma(v_j[i], w[r][j], acc) for j < n_cells in order,
// starting from out[r][i]; d % 16 == 0; w.size() == out.size().
void add_weighted_value_rows(const uint16_t* v, size_t v_stride, int64_t n_cells, int64_t d,
                             std::span<const float* const> w, std::span<float* const> out);

}  // namespace sluice::kernels
