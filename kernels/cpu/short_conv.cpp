#include "kernels/short_conv.h"

#include <cmath>

namespace sluice::kernels {

void short_conv(std::span<const float> x, std::span<const float> w, std::span<float> state,
                int64_t n_tokens, int64_t n_ch, int64_t d_conv, std::span<float> y,
                std::span<float> window) {
  const int64_t n_past = d_conv - 1;
  float* win = window.data();
  for (int64_t c = 0; c < n_ch; ++c) {
    float* st = state.data() + c * n_past;
    const float* wc = w.data() + c * d_conv;
    // One channel's timeline: past inputs then this batch's, so window t starts at win + t.
    for (int64_t i = 0; i < n_past; ++i) win[i] = st[i];
    for (int64_t t = 0; t < n_tokens; ++t) win[n_past + t] = x[t * n_ch + c];
    for (int64_t t = 0; t < n_tokens; ++t) {
      float sum = 0.0f;
      for (int64_t i = 0; i < d_conv; ++i) sum = std::fma(win[t + i], wc[i], sum);
      y[t * n_ch + c] = sum;
    }
    for (int64_t i = 0; i < n_past; ++i) st[i] = win[n_tokens + i];
  }
}

}  // namespace sluice::kernels
