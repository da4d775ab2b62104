// Small element-wise vector ops on caller-owned buffers (ggml_add, ggml_mul, ggml_scale).
// y may alias a or b. All spans have the same length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::kernels {

void add(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a + b
void mul(std::span<const float> a, std::span<const float> b, std::span<float> y);  // y = a * b
void scale(std::span<const float> x, float s, std::span<float> y);                 // y = x * s
// y += x * s (one rounding for the product, one for the sum)
void add_scaled(std::span<const float> x, float s, std::span<float> y);
// For j = 0 .. n_rows-1 in order: outs[g][i] += weights[g][j] * v_j[i] for every g, v_j the F16
// row of `n` values at rows + j * row_stride (ggml's bits), each product and sum rounded as
// add_scaled's are. The rows are widened once for all the outputs (attention's heads that share
// a value row), and the outputs stay in registers across a tile of rows. Every outs[g] holds n
// floats and every weights[g] n_rows; weights.size() == outs.size().
void add_scaled_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                         std::span<const float* const> weights, std::span<float* const> outs);
// out[h][j] = vec_dot(F16, row j, q[h], n) for every h, row j the F16 row of `n` values at rows +
// j * row_stride and q[h] an F16 activation row: the same bits as one vec_dot per pair, with each
// row widened once for all of q (attention's heads that share a key row). Every out[h] holds
// n_rows floats; q.size() == out.size().
void dot_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                  std::span<const uint16_t* const> q, std::span<float* const> out);

// Attention's batched products on an F16 KV cache in llamafile's tinyBLAS order, which ggml takes
// for >= 2 tokens once the activation (q, or the softmaxed kq) is rounded to F16, where the summed
// length is a multiple of 16. Widening F16 is exact, so each sum is one 16-lane FMA accumulator
// over 16-value steps, then the lanes added as _mm512_reduce_add_ps adds them.
//   dot_f16_rows_tinyblas: out[h][j] = that dot of key row j and q[h] (n % 16 == 0).
void dot_f16_rows_tinyblas(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                           std::span<const uint16_t* const> q, std::span<float* const> out);
//   fma_f16_rows_into_lanes: V^T kq over cells, a tile of cells at a time. Cell c's accumulator
//   lane is c % 16: for each cell c = first_cell + j (j ascending) and every output g,
//   lanes[g][i * 16 + c % 16] = fma(v_c[i], weights[g][j], that lane). Each lanes[g] holds 16 * n
//   floats, zeroed before the first tile; reduce_tinyblas_lanes then gives out[i], the 16 lanes
//   of channel i summed. `scratch` holds fma_f16_rows_scratch_floats(n, weights.size(), cells)
//   floats, for calls over at most `cells` cells from a 16-aligned first cell (one more chunk
//   than that otherwise).
void fma_f16_rows_into_lanes(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n,
                             std::span<const float* const> weights, std::span<float* const> lanes, float* scratch);
size_t fma_f16_rows_scratch_floats(int64_t n, int64_t n_out, int64_t cells);
// Cells the SIMD kernels transpose and sum per group: a call over at least this many cells sends
// each accumulator through memory once per group.
int64_t fma_f16_rows_group_cells();
void reduce_tinyblas_lanes(const float* lanes, int64_t n, float* out);

}  // namespace sluice::kernels
