#include "kernels/res_mix.h"

#include <cmath>
#include <limits>

namespace sluice::kernels {

void res_mix(std::span<const float* const> candidates, std::span<const float> w, float eps,
             std::span<float> probs, std::span<float> out) {
  const size_t n_embd = w.size();
  const size_t n = candidates.size();
  float max = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    const float* x = candidates[i];
    double sq = 0.0;
    for (size_t e = 0; e < n_embd; ++e) sq += static_cast<double>(x[e] * x[e]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sq / static_cast<double>(n_embd)) + eps);
    double s = 0.0;  // ggml_mul (float products) then ggml_sum_rows (double sum)
    for (size_t e = 0; e < n_embd; ++e) s += static_cast<double>((x[e] * scale) * w[e]);
    probs[i] = static_cast<float>(s);
    max = s > max ? s : max;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    probs[i] = std::exp(probs[i] - max);
    sum += static_cast<double>(probs[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) probs[i] *= inv;

  const float* cur = candidates[n - 1];
  const float p_cur = probs[n - 1];
  for (size_t e = 0; e < n_embd; ++e) {
    float acc = 0.0f;
    for (size_t i = 0; i + 1 < n; ++i) acc += candidates[i][e] * probs[i];
    out[e] = n > 1 ? acc + cur[e] * p_cur : cur[e];
  }
}

}  // namespace sluice::kernels
