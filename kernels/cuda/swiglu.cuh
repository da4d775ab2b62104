// swiglu kernel: y = silu(gate) * up = gate / (1 + exp(-gate)) * up, element-wise, grid-stride.
// expf is the precise one (no --use_fast_math); the CPU layer's vectorized expf differs from it
// by at most an ulp or two.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sluice::kernels::cuda::detail {

constexpr int kSwigluThreads = 256;

static __global__ void __launch_bounds__(kSwigluThreads)
    swiglu_kernel(const float* gate, const float* __restrict__ up, int64_t n, float* y) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    y[i] = __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), up[i]);
  }
}

}  // namespace sluice::kernels::cuda::detail
