// Sampler: greedy, filters, penalty, seeds, and option checks.
#include <doctest/doctest.h>

#include <set>
#include <vector>

#include "common/error.h"
#include "app/sampler.h"

using namespace sluice;
using namespace sluice::core;

TEST_CASE("greedy sampling takes the largest logit and the lowest id on ties") {
  Sampler s({.temperature = 0}, 5);
  CHECK(s.sample(std::vector<float>{1, 3, 2, 3, 0}) == 1);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits of recent tokens") {
  Sampler s({.temperature = 0, .repeat_penalty = 2.0f, .repeat_last_n = 4}, 3);
  s.accept(0);
  CHECK(s.sample(std::vector<float>{3.0f, 2.0f, -1.0f}) == 1);  // 3/2 < 2
  Sampler n({.temperature = 0, .repeat_penalty = 2.0f, .repeat_last_n = 4}, 2);
  n.accept(1);
  CHECK(n.sample(std::vector<float>{-1.5f, -1.0f}) == 0);  // -1 * 2 < -1.5
}

TEST_CASE("the repetition penalty forgets tokens older than repeat_last_n") {
  Sampler s({.temperature = 0, .repeat_penalty = 10.0f, .repeat_last_n = 2}, 3);
  s.accept(0);
  s.accept(1);
  s.accept(2);  // 0 falls out of the window
  CHECK(s.sample(std::vector<float>{1.0f, 2.0f, 2.0f}) == 0);
}

TEST_CASE("top-k 1 is greedy at any temperature") {
  Sampler s({.temperature = 5.0f, .top_k = 1, .top_p = 1.0f, .min_p = 0.0f, .seed = 7}, 4);
  for (int i = 0; i < 20; ++i) CHECK(s.sample(std::vector<float>{0.1f, 0.3f, 0.2f, 0.0f}) == 1);
}

TEST_CASE("min-p drops tokens far below the best one") {
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.5f, .seed = 1}, 3);
  // p ratio of token 2 to token 0 is e^-10: always filtered; tokens 0 and 1 are both allowed.
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(s.sample(std::vector<float>{0.0f, -0.1f, -10.0f}));
  CHECK(seen == std::set<int32_t>{0, 1});
}

TEST_CASE("top-p keeps the smallest set reaching the probability mass") {
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .min_p = 0.0f, .seed = 3}, 3);
  for (int i = 0; i < 50; ++i) CHECK(s.sample(std::vector<float>{2.0f, 0.0f, 0.0f}) == 0);  // p0 = 0.79 >= 0.5
}

TEST_CASE("the same seed gives the same draws and another seed other draws") {
  const std::vector<float> logits{0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  auto draws = [&](uint64_t seed) {
    Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed}, 8);
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(s.sample(logits));
    return out;
  };
  CHECK(draws(42) == draws(42));
  CHECK(draws(42) != draws(43));
}

TEST_CASE("sampler options out of range are rejected") {
  CHECK_THROWS_WITH_AS(Sampler({.temperature = -1}, 4), doctest::Contains("--temp"), Error);
  CHECK_THROWS_WITH_AS(Sampler({.top_p = 1.5f}, 4), doctest::Contains("--top-p"), Error);
  CHECK_THROWS_WITH_AS(Sampler({.repeat_penalty = 0}, 4), doctest::Contains("--repeat-penalty"), Error);
}
