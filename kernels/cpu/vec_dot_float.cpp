// Scalar dot products of the float formats. Products are formed in f32 (as ggml does) and summed
// in double, so the scalar reference is close to exact and any SIMD summation order is within
// rounding of it.
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

float vec_dot_f32(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(act);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * y[i]);
  return float(sum);
}

float vec_dot_f16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(act);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(fp16_to_f32(x[i]) * fp16_to_f32(y[i]));
  return float(sum);
}

void dot_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                  int n_q, float* const* out) {
  for (int h = 0; h < n_q; ++h)
    for (int64_t j = 0; j < n_rows; ++j) out[h][j] = vec_dot_f16(rows + size_t(j) * row_stride, q[h], n);
}

float vec_dot_bf16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(act);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(bf16_to_f32(x[i]) * bf16_to_f32(y[i]));
  return float(sum);
}

}  // namespace sluice::kernels::cpu
