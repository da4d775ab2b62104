// Router kernel and its host launcher. One block of kRouteThreads threads per token: gating over
// the experts (strided over threads), then k rounds of a block arg-max under route_before.
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/route.cuh"

namespace sluice::kernels::cuda {

namespace detail {
namespace {

constexpr int kRouteThreads = 256;

struct Candidate {
  float v;
  int32_t id;  // -1: none
};

__device__ __forceinline__ Candidate better(Candidate a, Candidate b) {
  if (a.id < 0) return b;
  if (b.id < 0) return a;
  return route_before(b.v, b.id, a.v, a.id) ? b : a;
}

__device__ __forceinline__ Candidate warp_best(Candidate c) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    Candidate o;
    o.v = __shfl_xor_sync(kFullMask, c.v, off);
    o.id = __shfl_xor_sync(kFullMask, c.id, off);
    c = better(c, o);
  }
  return c;
}

__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int n_expert, int k,
                 bool sigmoid, bool norm, float scale, int32_t* __restrict__ ids, float* __restrict__ weights) {
  __shared__ float probs[kRouteMaxExperts];
  __shared__ float sel[kRouteMaxExperts];
  __shared__ int32_t chosen[kRouteMaxK];
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  __shared__ Candidate cand[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* lg = logits + int64_t(blockIdx.x) * n_expert;

  if (sigmoid) {
    for (int i = tid; i < n_expert; i += blockDim.x) probs[i] = 1.0f / (1.0f + expf(-lg[i]));
  } else {
    // kernels::softmax: exp(x - max), sum in double, times (float)(1 / sum)
    float m = -INFINITY;
    for (int i = tid; i < n_expert; i += blockDim.x) m = fmaxf(m, lg[i]);
    m = block_max(m, fscratch);
    double sum = 0.0;
    for (int i = tid; i < n_expert; i += blockDim.x) {
      const float e = expf(lg[i] - m);
      probs[i] = e;
      sum += double(e);
    }
    sum = block_sum(sum, dscratch);
    const float inv = float(1.0 / sum);
    for (int i = tid; i < n_expert; i += blockDim.x) probs[i] *= inv;
  }
  for (int i = tid; i < n_expert; i += blockDim.x) sel[i] = bias ? probs[i] + bias[i] : probs[i];
  __syncthreads();

  for (int s = 0; s < k; ++s) {
    Candidate c{0.0f, -1};
    for (int i = tid; i < n_expert; i += blockDim.x) {
      bool taken = false;
      for (int t = 0; t < s; ++t) taken |= chosen[t] == i;
      if (!taken) c = better(c, Candidate{sel[i], i});
    }
    c = warp_best(c);
    if (lane == 0) cand[warp] = c;
    __syncthreads();
    if (warp == 0) {
      c = lane < int(blockDim.x >> 5) ? cand[lane] : Candidate{0.0f, -1};
      c = warp_best(c);
      if (lane == 0) chosen[s] = c.id;
    }
    __syncthreads();
  }

  if (tid == 0) {
    float w[kRouteMaxK];
    route_weights(probs, chosen, k, norm, scale, w);
    for (int i = 0; i < k; ++i) {
      ids[int64_t(blockIdx.x) * k + i] = chosen[i];
      weights[int64_t(blockIdx.x) * k + i] = w[i];
    }
  }
}

}  // namespace
}  // namespace detail

void route(const float* logits, const float* bias, int64_t n_tokens, int64_t n_expert, int64_t k,
           Gating gating, bool norm, float scale, int32_t* ids, float* weights, Stream& stream) {
  if (n_expert <= 0 || n_expert > detail::kRouteMaxExperts || k <= 0 || k > n_expert || k > detail::kRouteMaxK ||
      n_tokens < 0 || n_tokens > 0x7fffffff)
    throw Error(ErrorCode::invalid_argument,
                "route: " + std::to_string(n_tokens) + " tokens, " + std::to_string(n_expert) + " experts, top " +
                    std::to_string(k) + " outside the CUDA router's limits (experts <= " +
                    std::to_string(detail::kRouteMaxExperts) + ", k <= " + std::to_string(detail::kRouteMaxK) + ")");
  if (n_tokens == 0) return;
  if (!logits || !ids || !weights) throw Error(ErrorCode::invalid_argument, "route: null device pointer");
  detail::clear_last_error();
  detail::route_kernel<<<unsigned(n_tokens), detail::kRouteThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      logits, bias, int(n_expert), int(k), gating == Gating::sigmoid, norm, scale, ids, weights);
  SLUICE_CUDA_CHECK_LAUNCH("route");
}

}  // namespace sluice::kernels::cuda
