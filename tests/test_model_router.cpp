// route_token against hand-computed routing decisions.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/llama/router.h"

using namespace sluice::core;

namespace {
struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> w;
  std::vector<int32_t> groups;
};
Routed route(const RouterParams& p, const std::vector<float>& logits, const std::vector<float>& bias = {}) {
  Routed r;
  r.ids.resize(static_cast<size_t>(p.n_expert_used));
  r.w.resize(r.ids.size());
  r.groups.resize(p.n_groups > 1 ? static_cast<size_t>(p.n_group_used) : 0);
  std::vector<float> scratch(p.scratch_floats());
  route_token(p, logits, bias, r.ids, r.w, r.groups, scratch);
  return r;
}
}  // namespace

TEST_CASE("softmax routing picks the top-k and renormalizes their probabilities") {
  RouterParams p{.gating = GatingFunc::softmax, .n_expert = 4, .n_expert_used = 2, .norm = true};
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 1.0f};
  const Routed r = route(p, logits);
  CHECK(r.ids == std::vector<int32_t>{1, 3});
  const double e1 = std::exp(2.0), e3 = std::exp(1.0);
  CHECK(r.w[0] == doctest::Approx(e1 / (e1 + e3)).epsilon(1e-6));
  CHECK(r.w[1] == doctest::Approx(e3 / (e1 + e3)).epsilon(1e-6));
}

TEST_CASE("softmax routing without renormalization keeps the full-softmax probabilities") {
  RouterParams p{.gating = GatingFunc::softmax, .n_expert = 3, .n_expert_used = 1};
  const Routed r = route(p, {0.0f, 0.0f, std::log(2.0f)});
  CHECK(r.ids == std::vector<int32_t>{2});
  CHECK(r.w[0] == doctest::Approx(0.5).epsilon(1e-6));
}

TEST_CASE("sigmoid routing selects by biased score but weighs by the unbiased probability") {
  RouterParams p{.gating = GatingFunc::sigmoid, .n_expert = 4, .n_expert_used = 2, .norm = true,
                 .scale_on = true, .scale = 2.5f};
  const std::vector<float> logits{1.0f, 0.9f, 0.0f, -3.0f};
  const std::vector<float> bias{0.0f, 0.0f, 0.3f, 0.0f};  // lifts expert 2 past expert 1
  const Routed r = route(p, logits, bias);
  // selection scores: 0.731, 0.711, 0.5 + 0.3 = 0.8, 0.047 -> experts 2 then 0
  CHECK(r.ids == std::vector<int32_t>{2, 0});
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double s0 = sig(1.0), s2 = sig(0.0);
  CHECK(r.w[0] == doctest::Approx(2.5 * s2 / (s0 + s2)).epsilon(1e-6));
  CHECK(r.w[1] == doctest::Approx(2.5 * s0 / (s0 + s2)).epsilon(1e-6));
}

TEST_CASE("group-limited routing only picks experts of the best groups") {
  // 8 experts in 4 groups of 2; group score = sum of both members.
  RouterParams p{.gating = GatingFunc::sigmoid, .n_expert = 8, .n_expert_used = 2, .n_groups = 4,
                 .n_group_used = 2};
  // Expert 0 alone is the best, but its group (0,1) sums low; groups 2 (4,5) and 3 (6,7) win.
  const std::vector<float> logits{5.0f, -5.0f, 1.0f, 1.0f, 2.0f, 2.0f, 1.5f, 1.5f};
  const Routed r = route(p, logits);
  CHECK(r.groups == std::vector<int32_t>{2, 3});
  CHECK(r.ids == std::vector<int32_t>{4, 5});
}

TEST_CASE("renormalization clamps a vanishing weight sum") {
  RouterParams p{.gating = GatingFunc::sigmoid, .n_expert = 2, .n_expert_used = 1, .norm = true};
  const Routed r = route(p, {-30.0f, -40.0f});
  CHECK(r.ids == std::vector<int32_t>{0});
  CHECK(r.w[0] == doctest::Approx(1.0f / (1.0f + std::exp(30.0f)) / 6.103515625e-5f).epsilon(1e-5));
}
