#include "app/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace sluice::core {

Sampler::Sampler(const SamplerOptions& o, int64_t n_vocab) : o_(o), n_vocab_(n_vocab), rng_(o.seed) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature))
    throw Error(ErrorCode::invalid_argument, "--temp " + std::to_string(o.temperature) + " must be >= 0");
  if (!(o.top_p >= 0.0f && o.top_p <= 1.0f))
    throw Error(ErrorCode::invalid_argument, "--top-p " + std::to_string(o.top_p) + " must be in [0, 1]");
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f))
    throw Error(ErrorCode::invalid_argument, "--min-p " + std::to_string(o.min_p) + " must be in [0, 1]");
  if (!(o.repeat_penalty > 0.0f))
    throw Error(ErrorCode::invalid_argument, "--repeat-penalty " + std::to_string(o.repeat_penalty) + " must be > 0");
  if (n_vocab <= 0) throw Error(ErrorCode::invalid_argument, "empty vocabulary");
  cand_.resize(static_cast<size_t>(n_vocab));
  work_.resize(static_cast<size_t>(n_vocab));
  history_.resize(static_cast<size_t>(std::max(o.repeat_last_n, 0)));
}

void Sampler::accept(int32_t token) {
  if (history_.empty()) return;
  history_[history_next_] = token;
  history_next_ = (history_next_ + 1) % history_.size();
  history_size_ = std::min(history_size_ + 1, history_.size());
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const uint8_t> allowed) {
  if (static_cast<int64_t>(logits.size()) != n_vocab_)
    throw Error(ErrorCode::invalid_argument, "logits row has " + std::to_string(logits.size()) +
                                                 " values, expected " + std::to_string(n_vocab_));
  std::copy(logits.begin(), logits.end(), work_.begin());
  if (o_.repeat_penalty != 1.0f) {
    // Each distinct recent token is penalized once.
    for (size_t i = 0; i < history_size_; ++i) {
      const int32_t t = history_[i];
      if (t < 0 || t >= n_vocab_) continue;
      bool seen = false;
      for (size_t j = 0; j < i && !seen; ++j) seen = history_[j] == t;
      if (seen) continue;
      float& l = work_[static_cast<size_t>(t)];
      l = l > 0 ? l / o_.repeat_penalty : l * o_.repeat_penalty;
    }
  }
  if (!allowed.empty()) {
    if (static_cast<int64_t>(allowed.size()) != n_vocab_) throw Error(ErrorCode::internal, "token mask of the wrong size");
    for (size_t i = 0; i < allowed.size(); ++i)
      if (!allowed[i]) work_[i] = -std::numeric_limits<float>::infinity();
  }
  if (o_.temperature <= 0.0f) {
    int32_t best = 0;
    for (int64_t i = 1; i < n_vocab_; ++i)
      if (work_[static_cast<size_t>(i)] > work_[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    return best;
  }
  for (int64_t i = 0; i < n_vocab_; ++i) cand_[static_cast<size_t>(i)] = {work_[static_cast<size_t>(i)], static_cast<int32_t>(i)};
  auto by_logit = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t n = cand_.size();
  if (o_.top_k > 0 && static_cast<size_t>(o_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + o_.top_k, cand_.end(), by_logit);
    n = static_cast<size_t>(o_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Probabilities at temperature 1 for top-p / min-p, as llama.cpp's filters see them.
  const float max_l = cand_[0].first;
  auto probs = [&](float temp) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>((cand_[i].first - max_l) / temp));
    return sum;
  };
  if (o_.top_p < 1.0f) {
    const double sum = probs(1.0f);
    double cum = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += std::exp(static_cast<double>(cand_[i].first - max_l)) / sum;
      if (cum >= o_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = std::max<size_t>(keep, 1);
  }
  if (o_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  l_i - l_max >= ln(min_p)
    const float cut = max_l + std::log(o_.min_p);
    size_t keep = 1;
    while (keep < n && cand_[keep].first >= cut) ++keep;
    n = keep;
  }
  const double sum = probs(o_.temperature);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double r = uni(rng_) * sum;
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += std::exp(static_cast<double>((cand_[i].first - max_l) / o_.temperature));
    if (r < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace sluice::core
