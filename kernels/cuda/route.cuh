// route: MoE router kernel, one block per token (core/llama/router.h's route_token with n_groups == 1).
//
// The selection order is a strict total order, so a parallel arg-max reduction picks what the
// CPU's kernels::top_k picks: larger value first, ties to the lower id, NaN after every number
// (and among NaNs the lower id). route_before is shared with the host tests.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/dequant_common.cuh"  // SLUICE_HD

namespace sluice::kernels::cuda::detail {

// True when (va, a) ranks before (vb, b).
SLUICE_HD bool route_before(float va, int32_t a, float vb, int32_t b) {
  const bool na = va != va, nb = vb != vb;  // isnan, usable on host and device alike
  if (na || nb) return na && nb ? a < b : nb;
  if (va != vb) return va > vb;
  return a < b;
}

// w[i] = probs[ids[i]], then normalized (sum in double, clamped at 6.103515625e-5) and scaled,
// in the CPU's order. Serial: k is small.
SLUICE_HD void route_weights(const float* probs, const int32_t* ids, int k, bool norm, float scale, float* w) {
  for (int i = 0; i < k; ++i) w[i] = probs[ids[i]];
  if (norm) {
    double sum = 0.0;
    for (int i = 0; i < k; ++i) sum += double(w[i]);
    const float s = fmaxf(float(sum), 6.103515625e-5f);
    for (int i = 0; i < k; ++i) w[i] = w[i] / s;
  }
  if (scale != 1.0f)
    for (int i = 0; i < k; ++i) w[i] *= scale;
}

constexpr int kRouteMaxExperts = 1024;
constexpr int kRouteMaxK = 64;

}  // namespace sluice::kernels::cuda::detail
