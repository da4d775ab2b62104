#include "app/token_logprobs.h"

#include <algorithm>
#include <cmath>

namespace sluice::core {

void token_logprob(std::span<const float> row, int32_t token, int n_top, TokenLogprob& out) {
  n_top = std::clamp(n_top, 0, kMaxTopLogprobs);
  float max = row[0];
  for (float l : row) max = std::max(max, l);
  // Pass 2: the sum, and the top N by logit in a sorted array (an entry moves only when a logit
  // beats the N-th best, so almost every element costs one compare).
  std::array<std::pair<float, int32_t>, kMaxTopLogprobs> best{};
  int n_best = 0;
  double sum = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    const float l = row[i];
    sum += std::exp(static_cast<double>(l) - static_cast<double>(max));
    if (n_top == 0 || (n_best == n_top && l <= best[static_cast<size_t>(n_best - 1)].first)) continue;
    int at = n_best < n_top ? n_best++ : n_top - 1;
    while (at > 0 && best[static_cast<size_t>(at - 1)].first < l) {  // strictly less: ties keep the lower id first
      best[static_cast<size_t>(at)] = best[static_cast<size_t>(at - 1)];
      --at;
    }
    best[static_cast<size_t>(at)] = {l, static_cast<int32_t>(i)};
  }
  const double lse = static_cast<double>(max) + std::log(sum);
  out.token = token;
  out.logprob = static_cast<double>(row[static_cast<size_t>(token)]) - lse;
  out.n_top = n_best;
  for (int k = 0; k < n_best; ++k)
    out.top[static_cast<size_t>(k)] = {best[static_cast<size_t>(k)].second,
                                       static_cast<double>(best[static_cast<size_t>(k)].first) - lse};
}

}  // namespace sluice::core
