// rms_norm kernel: one block per row. Squares in float, summed in double (the CPU layer's
// kernels/rms_norm.h order up to summation order), then y = (x * scale) * w.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/reduce.cuh"

namespace sluice::kernels::cuda::detail {

constexpr int kRmsNormThreads = 256;

// x and y may alias: each thread rewrites only the elements it read, after the block's sum.
static __global__ void __launch_bounds__(kRmsNormThreads)
    rms_norm_kernel(const float* x, const float* __restrict__ weight, float eps, int64_t n, float* y) {
  __shared__ double scratch[32];
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i];
    sum += double(__fmul_rn(v, v));  // the square rounds to float first, as on the CPU
  }
  sum = block_sum(sum, scratch);
  const float mean = float(sum / double(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = __fmul_rn(xr[i], scale);
    yr[i] = weight ? __fmul_rn(v, weight[i]) : v;
  }
}

}  // namespace sluice::kernels::cuda::detail
