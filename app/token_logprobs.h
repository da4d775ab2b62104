// Log-probabilities of sampled tokens for serve's `logprobs` / `top_logprobs`: the log-softmax
// of the raw logits row (before repetition penalty, temperature and truncation), for the sampled
// token and the N most likely tokens.
//
// Exactness: log p(i) = l_i - (m + log(sum_j exp(l_j - m))), m the row's maximum, with the sum in
// double over j = 0..n_vocab-1 in order, so the values equal that formula evaluated on the rows
// `sluice run --logits-out` writes (tests/test_serve_logprobs.cpp).
//
// Cost: two passes over the row; the top N are kept in a sorted array of at most
// kMaxTopLogprobs entries (no sort of the vocabulary, no allocation: TokenLogprob is fixed-size).
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace sluice::core {

inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's bound on top_logprobs

struct TopLogprob {
  int32_t token = -1;
  double logprob = 0;
};

struct TokenLogprob {
  int32_t token = -1;
  double logprob = 0;
  int32_t n_top = 0;  // entries of `top` in use, most likely first (ties: lower id first)
  std::array<TopLogprob, kMaxTopLogprobs> top{};
};

// `token` in [0, row.size()), n_top in [0, kMaxTopLogprobs].
void token_logprob(std::span<const float> row, int32_t token, int n_top, TokenLogprob& out);

}  // namespace sluice::core
