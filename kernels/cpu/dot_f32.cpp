#include "kernels/dot_f32.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"
#include "kernels/quant.h"

namespace sluice::kernels {

namespace plain_impl {
#include "kernels/cpu/dot_f32_impl.h"
}  // namespace plain_impl

namespace fma_impl {
float dot_f32_ggml_vec(const float* x, const float* y, int64_t n);
float dot_f32_tinyblas(const float* x, const float* y, int64_t n);
void matmul_f32_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, ThreadPool& pool);
void matmul_f16_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, bool batch_keeps_f32, std::span<float> x_scratch, ThreadPool& pool);
}  // namespace fma_impl

float dot_f32_ggml_vec(const float* x, const float* y, int64_t n) {
  return cpu::have_avx2_fma() ? fma_impl::dot_f32_ggml_vec(x, y, n) : plain_impl::dot_f32_ggml_vec(x, y, n);
}

float dot_f32_tinyblas(const float* x, const float* y, int64_t n) {
  return cpu::have_avx2_fma() ? fma_impl::dot_f32_tinyblas(x, y, n) : plain_impl::dot_f32_tinyblas(x, y, n);
}

void matmul_f32_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, ThreadPool& pool) {
  if (cpu::have_avx2_fma()) fma_impl::matmul_f32_ggml(w, x, n_tokens, y, contiguous, pool);
  else plain_impl::matmul_f32_ggml(w, x, n_tokens, y, contiguous, pool);
}

void matmul_f16_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, bool batch_keeps_f32, std::span<float> x_scratch, ThreadPool& pool) {
  if (cpu::have_avx2_fma()) fma_impl::matmul_f16_ggml(w, x, n_tokens, y, contiguous, batch_keeps_f32, x_scratch, pool);
  else plain_impl::matmul_f16_ggml(w, x, n_tokens, y, contiguous, batch_keeps_f32, x_scratch, pool);
}

}  // namespace sluice::kernels
