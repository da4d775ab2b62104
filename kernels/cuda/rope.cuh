// rope: the angle of each rotated pair, shared by the kernel (rope.cu) and the host tests.
//
// RopeArgs carries what kernels/cpu/rope.cpp derives once per call (theta_scale, the YaRN
// correction dims). rope_cos_sin reproduces rope_cache's entry for pair i0/2 at `pos`: theta
// starts at (float)pos and is multiplied by theta_scale once per earlier pair, in float, exactly
// as the CPU loop does; the YaRN blend and mscale follow line for line. On the host it equals
// rope_cache bit for bit (tests/test_cuda_ops_host.cu); on the GPU cosf/sinf/logf may differ in
// the last ulp or two.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/dequant_common.cuh"  // SLUICE_HD
#include "kernels/rope.h"

namespace sluice::kernels::cuda::detail {

struct RopeArgs {
  int n_dims = 0;
  bool neox = false;
  float theta_scale = 1.0f;  // powf(freq_base, -2 / n_dims)
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float corr0 = 0.0f, corr1 = 0.0f;  // rope_yarn_corr_dims
};

// theta_scale and the YaRN dims of `p`, computed as kernels/cpu/rope.cpp does (defined in rope.cu).
RopeArgs rope_args(const RopeParams& p);

SLUICE_HD void rope_cos_sin(const RopeArgs& a, int64_t pos, int i0, float* c, float* s) {
  float theta_extrap = float(pos);
  for (int k = 0; k < i0; k += 2) theta_extrap *= a.theta_scale;
  const float theta_interp = a.freq_scale * theta_extrap;
  float theta = theta_interp;
  float mscale = a.attn_factor;
  if (a.ext_factor != 0.0f) {
    const float y = (float(i0 / 2) - a.corr0) / fmaxf(0.001f, a.corr1 - a.corr0);
    const float ramp_mix = (1 - fminf(1.0f, fmaxf(0.0f, y))) * a.ext_factor;
    theta = fmaf(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
    mscale *= fmaf(0.1f, logf(1.0f / a.freq_scale), 1.0f);
  }
  *c = cosf(theta) * mscale;
  *s = sinf(theta) * mscale;
}

// Element indices of pair i0/2 within a head: NORM (2i, 2i+1), NEOX (i, i + n_dims/2).
SLUICE_HD void rope_pair(const RopeArgs& a, int i0, int* first, int* second) {
  *first = a.neox ? i0 / 2 : i0;
  *second = a.neox ? i0 / 2 + a.n_dims / 2 : i0 + 1;
}


}  // namespace sluice::kernels::cuda::detail
