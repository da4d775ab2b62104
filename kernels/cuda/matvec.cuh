// matvec / matmul kernel over any weight type with a dequantizer (dequant_*.cuh).
//
// One warp per output row (or kRowsPerWarp rows sharing each load of x), kMatvecWarps warps per block.
// A row is cut into "units" of D::kRun values (unit u = values u*kRun .. u*kRun + kRun - 1, inside
// block u / (kQK / kRun)); lane l takes units l, l + 32, ... so a warp walks the row's bytes front
// to back, dequantizes in registers and dots with f32 x (read through the read-only cache; x is
// small and shared by all rows). Partial sums are reduced with shuffles; lane 0 writes y.
// The token dimension (matmul) is handled kTokens at a time per block (blockIdx.y), so a weight
// row is read once per kTokens tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/reduce.cuh"

namespace sluice::kernels::cuda::detail {

constexpr int kMatvecWarps = 8;  // warps per block

// x[0..8) from a 16-byte aligned (aligned == true) or 4-byte aligned address.
template <int N>
__device__ __forceinline__ void load_x(const float* __restrict__ p, bool aligned, float* out) {
  if constexpr (N % 4 == 0) {
    if (aligned) {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p + i));
        out[i] = v.x, out[i + 1] = v.y, out[i + 2] = v.z, out[i + 3] = v.w;
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = __ldg(p + i);
}

// y[t * n_rows + row] = dot(W[row], x[t * n_cols ..]) for t in [blockIdx.y * kTokens, ...).
// Preconditions (checked by the host launcher): n_cols % D::kQK == 0, n_cols < 2^31, rows and
// base aligned to D::kAlign; x 16-byte aligned gives vector loads (x_aligned).
template <class D, int kRowsPerWarp, int kTokens>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_kernel(const uint8_t* __restrict__ w, size_t row_stride, int64_t n_rows, int n_cols,
                  const float* __restrict__ x, int64_t n_tokens, bool x_aligned, float* __restrict__ y) {
  constexpr int kUnitsPerBlock = D::kQK / D::kRun;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t(blockIdx.x) * kMatvecWarps + (threadIdx.x >> 5)) * kRowsPerWarp;
  if (row0 >= n_rows) return;  // whole warps leave together: the shuffles below stay full
  const int64_t t0 = int64_t(blockIdx.y) * kTokens;
  const int nt = int(n_tokens - t0 < kTokens ? n_tokens - t0 : kTokens);
  const int n_units = n_cols / D::kRun;
  const float* xt = x + t0 * n_cols;

  float acc[kRowsPerWarp][kTokens];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[r][t] = 0.0f;

#pragma unroll 2
  for (int u = lane; u < n_units; u += 32) {
    const int blk = u / kUnitsPerBlock, j = u % kUnitsPerBlock;
    float v[kRowsPerWarp][D::kRun];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = row0 + r < n_rows ? row0 + r : n_rows - 1;  // clamp: valid, unused
      D::run(w + row * row_stride + size_t(blk) * D::kBytes, j, v[r]);
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < nt) {
        float xv[D::kRun];
        load_x<D::kRun>(xt + int64_t(t) * n_cols + int64_t(u) * D::kRun, x_aligned, xv);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
          for (int i = 0; i < D::kRun; ++i) acc[r][t] = fmaf(v[r][i], xv[i], acc[r][t]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float s = warp_sum(acc[r][t]);
      if (lane == 0 && t < nt && row0 + r < n_rows) y[(t0 + t) * n_rows + row0 + r] = s;
    }
  }
}

}  // namespace sluice::kernels::cuda::detail
