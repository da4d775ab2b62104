#include "kernels/vec_ops.h"

#include <algorithm>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels {

void add(std::span<const float> a, std::span<const float> b, std::span<float> y) {
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
}

void mul(std::span<const float> a, std::span<const float> b, std::span<float> y) {
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] * b[i];
}

void scale(std::span<const float> x, float s, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s;
}

void add_scaled(std::span<const float> x, float s, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) {
    const float p = x[i] * s;
    y[i] += p;
  }
}

void add_scaled_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                         std::span<const float* const> weights, std::span<float* const> outs) {
  cpu::best_kernels().add_scaled_f16(rows, row_stride, n_rows, n, weights.data(), outs.data(),
                                     int(std::min(weights.size(), outs.size())));
}

void dot_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                  std::span<const uint16_t* const> q, std::span<float* const> out) {
  cpu::best_kernels().dot_f16_rows(rows, row_stride, n_rows, n, q.data(), int(std::min(q.size(), out.size())), out.data());
}

void dot_f16_rows_tinyblas(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                           std::span<const uint16_t* const> q, std::span<float* const> out) {
  cpu::best_kernels().dot_f16_rows_tinyblas(rows, row_stride, n_rows, n, q.data(), int(std::min(q.size(), out.size())),
                                            out.data());
}

void fma_f16_rows_into_lanes(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n,
                             std::span<const float* const> weights, std::span<float* const> lanes, float* scratch) {
  cpu::best_kernels().fma_f16_lanes(rows, row_stride, first_cell, n_rows, n, weights.data(), lanes.data(),
                                    int(std::min(weights.size(), lanes.size())), scratch);
}

size_t fma_f16_rows_scratch_floats(int64_t n, int64_t n_out, int64_t cells) {
  return cpu::tinyblas_lanes_scratch_floats(n, n_out, cells);
}

int64_t fma_f16_rows_group_cells() { return cpu::kTbVtCells; }

void reduce_tinyblas_lanes(const float* lanes, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = detail::reduce_add_16(lanes + 16 * i);
}

}  // namespace sluice::kernels
