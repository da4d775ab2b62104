#include "kernels/kda.h"

#include "kernels/dot_f32.h"

#include <cmath>
#include <limits>

namespace sluice::kernels {


void kda_l2_norm(std::span<float> x, int64_t D, float eps) {
  const int64_t n_rows = static_cast<int64_t>(x.size()) / D;
  const float eps_d = eps / static_cast<float>(D);
  const float post = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x.data() + r * D;
    double sum = 0.0;
    for (int64_t i = 0; i < D; ++i) sum += static_cast<double>(row[i] * row[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(D));
    const float scale = 1.0f / std::sqrt(mean + eps_d);
    for (int64_t i = 0; i < D; ++i) row[i] = (row[i] * scale) * post;
  }
}

void kda_decay_gate(std::span<const float> z, std::span<const float> a, float lb, int64_t H, int64_t D,
                    std::span<float> g) {
  const int64_t n = static_cast<int64_t>(z.size());
  const bool bounded = lb > -std::numeric_limits<float>::infinity();
  for (int64_t idx = 0; idx < n; ++idx) {
    const int64_t h = (idx / D) % H;
    const float x = z[idx];
    if (bounded) {
      const float s = -a[h] * x;  // exp(A_log) * (z + dt_bias)
      g[idx] = lb * (1.0f / (1.0f + std::exp(-s)));
    } else {
      const float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // ggml_softplus threshold
      g[idx] = a[h] * sp;
    }
  }
}

void kda_recurrence(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                    std::span<const float> g, std::span<const float> beta, std::span<float> state,
                    int64_t n_tokens, int64_t H, int64_t D, float scale, std::span<float> out,
                    std::span<float> exp_g, ThreadPool& pool) {
  const int64_t n = n_tokens * H * D;
  for (int64_t i = 0; i < n; ++i) exp_g[i] = std::exp(g[i]);
  // One work item per (head, value row j): the rows of S^T never interact.
  pool.parallel_for(H * D, D, [&](int64_t begin, int64_t end) {
    for (int64_t hj = begin; hj < end; ++hj) {
      const int64_t h = hj / D, j = hj % D;
      float* row = state.data() + h * D * D + j * D;  // S_h[.][j]
      for (int64_t t = 0; t < n_tokens; ++t) {
        const int64_t base = (t * H + h) * D;
        const float* kt = k.data() + base;
        const float* qt = q.data() + base;
        const float* gt = exp_g.data() + base;
        for (int64_t i = 0; i < D; ++i) row[i] *= gt[i];
        const float kv = dot_f32_ggml_vec(row, kt, D);
        const float delta = (v[base + j] - kv) * beta[t * H + h];
        for (int64_t i = 0; i < D; ++i) row[i] = std::fma(kt[i], delta, row[i]);  // ggml_vec_mad_f32
        out[base + j] = dot_f32_ggml_vec(row, qt, D) * scale;
      }
    }
  });
}

}  // namespace sluice::kernels
