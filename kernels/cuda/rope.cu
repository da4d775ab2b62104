// Host launcher of rope: derives theta_scale and the YaRN dims as kernels/cpu/rope.cpp does.
#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope.cuh"

namespace sluice::kernels::cuda {

namespace detail {

constexpr int kRopeThreads = 128;

// grid (n_tokens, ceil(n_heads * n_dims/2 / kRopeThreads)); one thread per (head, pair).
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(RopeArgs a, float* x, int64_t row_stride, int64_t n_heads, int64_t head_stride,
                const int32_t* __restrict__ positions) {
  const int64_t half = a.n_dims / 2;
  const int64_t idx = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (idx >= n_heads * half) return;
  const int64_t h = idx / half;
  const int i0 = int(idx % half) * 2;
  float c, s;
  rope_cos_sin(a, positions[blockIdx.x], i0, &c, &s);
  int ia, ib;
  rope_pair(a, i0, &ia, &ib);
  float* v = x + int64_t(blockIdx.x) * row_stride + h * head_stride;
  const float x0 = v[ia], x1 = v[ib];
  // The CPU's fma(x0, c, -(x1 * s)): __fmul_rn keeps nvcc from fusing the second product too.
  v[ia] = fmaf(x0, c, -__fmul_rn(x1, s));
  v[ib] = fmaf(x0, s, __fmul_rn(x1, c));
}

RopeArgs rope_args(const RopeParams& p) {
  RopeArgs a;
  a.n_dims = p.n_dims;
  a.neox = p.mode == RopeMode::neox;
  a.theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_dims));
  a.freq_scale = p.freq_scale;
  a.ext_factor = p.ext_factor;
  a.attn_factor = p.attn_factor;
  float corr[2] = {0, 0};
  rope_yarn_corr_dims(p.n_dims, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr);
  a.corr0 = corr[0];
  a.corr1 = corr[1];
  return a;
}
}  // namespace detail

void rope(const RopeParams& p, float* x, int64_t n_tokens, int64_t row_stride, int64_t n_heads,
          int64_t head_stride, const int32_t* positions, Stream& stream) {
  if (p.n_dims <= 0 || p.n_dims % 2 != 0)
    throw Error(ErrorCode::invalid_argument, "rope: n_dims " + std::to_string(p.n_dims) + " must be positive and even");
  if (n_tokens < 0 || n_heads < 0 || n_tokens > 0x7fffffff)
    throw Error(ErrorCode::invalid_argument, "rope: bad shape " + std::to_string(n_tokens) + " tokens x " +
                                                 std::to_string(n_heads) + " heads");
  if (n_tokens == 0 || n_heads == 0) return;
  if (n_heads > 1 && head_stride < p.n_dims)
    throw Error(ErrorCode::invalid_argument, "rope: head stride " + std::to_string(head_stride) +
                                                 " is below n_dims " + std::to_string(p.n_dims));
  if (!x || !positions) throw Error(ErrorCode::invalid_argument, "rope: null device pointer");
  const int64_t work = n_heads * (p.n_dims / 2);
  const int64_t blocks_y = (work + detail::kRopeThreads - 1) / detail::kRopeThreads;
  if (blocks_y > 65535)
    throw Error(ErrorCode::invalid_argument, "rope: " + std::to_string(n_heads) + " heads of " +
                                                 std::to_string(p.n_dims) + " dims exceed the kernel's grid");
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(blocks_y));
  detail::clear_last_error();
  detail::rope_kernel<<<grid, detail::kRopeThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      detail::rope_args(p), x, row_stride, n_heads, head_stride, positions);
  SLUICE_CUDA_CHECK_LAUNCH("rope");
}

}  // namespace sluice::kernels::cuda
