#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace sluice::kernels {

namespace {

float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2 * static_cast<float>(std::numbers::pi))) /
         (2 * std::log(base));
}

float yarn_ramp(float low, float high, int i0) {
  const float y = (i0 / 2 - low) / std::max(0.001f, high - low);
  return 1 - std::min(1.0f, std::max(0.0f, y));
}

}  // namespace

void rope_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast,
                         float beta_slow, float dims[2]) {
  const float start = std::floor(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
  const float end = std::ceil(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(static_cast<float>(n_dims - 1), end);
}

void rope_cache(const RopeParams& p, int64_t pos, std::span<float> cache) {
  float corr[2] = {0, 0};
  rope_yarn_corr_dims(p.n_dims, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_dims));
  float theta_extrap = static_cast<float>(pos);
  for (int i0 = 0; i0 < p.n_dims; i0 += 2) {
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float ramp_mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
      theta = std::fma(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);  // contracted as in ggml
      mscale *= std::fma(0.1f, std::log(1.0f / p.freq_scale), 1.0f);
    }
    cache[i0] = std::cos(theta) * mscale;
    cache[i0 + 1] = std::sin(theta) * mscale;
    theta_extrap *= theta_scale;
  }
}

void rope_apply(const RopeParams& p, std::span<const float> cache, float* x, int64_t n_heads,
                int64_t head_stride) {
  const int half = p.n_dims / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_stride;
    for (int i0 = 0; i0 < p.n_dims; i0 += 2) {
      const float c = cache[i0];
      const float s = cache[i0 + 1];
      const int a = p.mode == RopeMode::norm ? i0 : i0 / 2;
      const int b = p.mode == RopeMode::norm ? i0 + 1 : i0 / 2 + half;
      const float x0 = v[a];
      const float x1 = v[b];
      // ggml is built with -march=native and GCC's default -ffp-contract=fast, which fuses the
      // first product of each line: x0*c - x1*s -> fma(x0, c, -(x1*s)).
      v[a] = std::fma(x0, c, -(x1 * s));
      v[b] = std::fma(x0, s, x1 * c);
    }
  }
}

}  // namespace sluice::kernels
