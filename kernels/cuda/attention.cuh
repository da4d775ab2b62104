// attention kernel: one block per (query head, token), online softmax over the visible keys in
// tiles of kAttnTile positions.
//
// Per tile: each warp dots q (staged in shared memory) with a quarter of the tile's keys, lanes
// striding over k_len (coalesced key reads); then the running max m, denominator l and output
// accumulator o (thread i owns output values i, i + kAttnThreads, ...) are rescaled by
// exp(m_old - m_new) and the tile's weights exp(s - m_new) times the value rows are added.
// out = o / l at the end. Scores are scale * q.k, as the CPU's softmax scales before its max.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace sluice::kernels::cuda::detail {

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnTile = 32;
constexpr int kAttnMaxVPerThread = 5;  // v_len <= 640 (MLA's 512 latent; GQA heads up to 576+)
constexpr int64_t kAttnMaxV = int64_t(kAttnThreads) * kAttnMaxVPerThread;
constexpr int64_t kAttnMaxK = 8192;    // q staged in shared memory

// Dynamic shared memory: q[k_len] floats.
static __global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(AttentionShape s, const float* __restrict__ q, const float* __restrict__ k_cache,
                     const float* __restrict__ v_cache, int64_t start_pos, float* __restrict__ out) {
  extern __shared__ float sq[];
  __shared__ float scores[kAttnTile];
  __shared__ float probs[kAttnTile];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int64_t g = h / (s.n_head / s.n_head_kv);
  const float* qv = q + t * s.q_stride + h * s.q_head_stride;
  for (int64_t i = tid; i < s.k_len; i += kAttnThreads) sq[i] = qv[i];
  const float* kb = k_cache + g * s.k_head_stride;
  const float* vb = v_cache + g * s.v_head_stride;
  const int64_t n_vis = start_pos + t + 1;  // causal

  float m = -INFINITY, l = 0.0f;
  float o[kAttnMaxVPerThread];
#pragma unroll
  for (int i = 0; i < kAttnMaxVPerThread; ++i) o[i] = 0.0f;
  __syncthreads();

  for (int64_t p0 = 0; p0 < n_vis; p0 += kAttnTile) {
    const int n_p = int(n_vis - p0 < kAttnTile ? n_vis - p0 : kAttnTile);
    for (int pp = warp; pp < n_p; pp += kAttnWarps) {
      const float* kr = kb + (p0 + pp) * s.k_row_stride;
      float dot = 0.0f;
      for (int64_t i = lane; i < s.k_len; i += 32) dot = fmaf(sq[i], __ldg(kr + i), dot);
      dot = warp_sum(dot);
      if (lane == 0) scores[pp] = s.scale * dot;
    }
    __syncthreads();
    float m_tile = -INFINITY;
    for (int pp = 0; pp < n_p; ++pp) m_tile = fmaxf(m_tile, scores[pp]);
    const float m_new = fmaxf(m, m_tile);
    // exp(-inf - m_new) = 0 on the first tile; a -inf m_new (all scores -inf) would give NaN,
    // as the CPU's softmax does.
    const float factor = expf(m - m_new);
    if (tid < n_p) probs[tid] = expf(scores[tid] - m_new);
    __syncthreads();
    float l_tile = 0.0f;
    for (int pp = 0; pp < n_p; ++pp) l_tile += probs[pp];
    l = l * factor + l_tile;
    m = m_new;
#pragma unroll
    for (int i = 0; i < kAttnMaxVPerThread; ++i) {
      const int64_t c = tid + int64_t(i) * kAttnThreads;
      if (c < s.v_len) {
        float acc = o[i] * factor;
        for (int pp = 0; pp < n_p; ++pp) acc = fmaf(probs[pp], __ldg(vb + (p0 + pp) * s.v_row_stride + c), acc);
        o[i] = acc;
      }
    }
    __syncthreads();  // scores and probs are rewritten by the next tile
  }
  float* ov = out + t * s.out_stride + h * s.out_head_stride;
  const float inv = 1.0f / l;
#pragma unroll
  for (int i = 0; i < kAttnMaxVPerThread; ++i) {
    const int64_t c = tid + int64_t(i) * kAttnThreads;
    if (c < s.v_len) ov[c] = o[i] * inv;
  }
}

}  // namespace sluice::kernels::cuda::detail
