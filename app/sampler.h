// Sampler: picks the next token from a logits row.
//
// Order (llama.cpp's default chain): repetition penalty over the last `repeat_last_n` accepted
// tokens, then greedy argmax when temperature <= 0 (ties go to the lowest id, as the reference
// outputs assume); otherwise top-k -> top-p -> min-p -> temperature -> softmax -> draw with a
// seeded 64-bit Mersenne Twister. A filter that is off (top_k <= 0, top_p >= 1, min_p <= 0)
// is skipped. The same seed and logits give the same tokens.
//
// Repetition penalty (llama.cpp): a logit l of a recent token becomes l / p when l > 0, else l * p.
// Candidates and history are preallocated for the vocabulary; sample() allocates nothing.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace sluice::core {

struct SamplerOptions {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;  // 1: off
  int repeat_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Error(invalid_argument) for negative temperature/penalty, top_p or min_p outside [0, 1].
  Sampler(const SamplerOptions& options, int64_t n_vocab);

  // `allowed` (empty, or one byte per token): the tokens a constraint lets through (non-zero);
  // the others get -inf before every filter, so greedy and each filter see only allowed tokens.
  // At least one token must be allowed.
  int32_t sample(std::span<const float> logits, std::span<const uint8_t> allowed = {});
  // Records a token for the repetition penalty (prompt tokens and generated ones).
  void accept(int32_t token);

 private:
  SamplerOptions o_;
  int64_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // (logit or prob, id)
  std::vector<int32_t> history_;                 // ring of the last repeat_last_n tokens
  size_t history_next_ = 0;
  size_t history_size_ = 0;
  std::vector<float> work_;  // penalized logits
};

}  // namespace sluice::core
