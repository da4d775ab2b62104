#include "kernels/vec_ops.h"

#include <algorithm>

#include "kernels/cpu/dispatch.h"

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

}  // namespace sluice::kernels
