// Warp and block reductions shared by the kernels (device code only).
#pragma once

#include <cuda_runtime.h>

namespace sluice::kernels::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` holds 32 values; the call synchronizes the block twice.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < n_warps ? scratch[lane] : T(0);
  return warp_sum(total);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const float m = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(m);
}

}  // namespace sluice::kernels::cuda::detail
