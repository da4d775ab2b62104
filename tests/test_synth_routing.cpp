#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "synth/synth_routing.h"

namespace synth = sluice::core::synth;

namespace {

synth::RouterDesign calibrated(const char* preset, uint32_t experts, double skew, const synth::HiddenProcess& h) {
  const synth::Preset p = synth::reduce(synth::find_preset(preset), 3, experts);
  synth::RouterDesign d = synth::router_design(p, 2, skew);
  d.ctx_std = h.ctx_std;
  d.ctx_share = synth::calibrate_ctx_share(d, h);
  return d;
}

void check_real_ranges(const synth::RoutingStats& s) {
  CHECK(s.entropy_norm >= 0.97);
  CHECK(s.hottest_ratio <= 2.5);
  CHECK(s.reuse_ratio() >= 1.5);
  CHECK(s.reuse_ratio() <= 3.0);
}

}  // namespace

TEST_CASE("calibrated routers land in the real models' ranges when routing sampled hidden states") {
  // Weight space: the stored router applied to the sampled hidden-state process. Presets whose
  // routers are small enough for a fast test; the large ones are covered in logit space below.
  for (std::string preset : {"qwen3-30b-a3b", "mixtral-8x7b", "tiny-deepseek2"}) {
    CAPTURE(preset);
    synth::HiddenProcess h;
    const synth::RouterDesign d = calibrated(preset.c_str(), 0, 1.0, h);
    const synth::RouterWeights r = synth::make_router(d, 42);
    synth::HiddenProcess sample = h;
    sample.seed = 7;  // other tokens than the calibration saw
    const synth::RoutingStats s = synth::estimate_routing(d, r, sample);
    MESSAGE(preset << ": entropy " << s.entropy_norm << ", hottest " << s.hottest_ratio << "x, reuse " << s.reuse
                   << " vs " << s.reuse_shuffled << " (" << s.reuse_ratio() << "x), context share " << d.ctx_share);
    check_real_ranges(s);
  }
}

TEST_CASE("calibrated routers of the large presets land in the real models' ranges in logit space") {
  for (std::string preset : {"kimi-k2", "kimi-k3", "deepseek-v3", "qwen3-235b-a22b"}) {
    CAPTURE(preset);
    synth::HiddenProcess h;
    const synth::RouterDesign d = calibrated(preset.c_str(), 0, 1.0, h);
    synth::HiddenProcess sample = h;
    sample.seed = 9;
    sample.n_seq = 64;  // 4096 tokens: enough selections per expert for the hottest-share check
    const synth::RoutingStats s = synth::estimate_routing_fast(d, sample);
    MESSAGE(preset << ": entropy " << s.entropy_norm << ", hottest " << s.hottest_ratio << "x, reuse " << s.reuse
                   << " vs " << s.reuse_shuffled << " (" << s.reuse_ratio() << "x)");
    check_real_ranges(s);
  }
}

TEST_CASE("the weight-space and logit-space estimators agree on a real-size router") {
  synth::HiddenProcess h;
  h.n_seq = 16;
  const synth::RouterDesign d = calibrated("qwen3-235b-a22b", 0, 1.0, h);
  const synth::RoutingStats fast = synth::estimate_routing_fast(d, h);
  const synth::RoutingStats full = synth::estimate_routing(d, synth::make_router(d, 3), h);
  CHECK(full.reuse_ratio() == doctest::Approx(fast.reuse_ratio()).epsilon(0.3));
  CHECK(full.entropy_norm == doctest::Approx(fast.entropy_norm).epsilon(0.02));
}

TEST_CASE("without a slowly varying hidden component consecutive tokens reuse experts only at chance") {
  for (std::string preset : {"qwen3-30b-a3b", "tiny-deepseek2"}) {
    CAPTURE(preset);
    const synth::Preset p = synth::reduce(synth::find_preset(preset), 2, 0);
    synth::RouterDesign d = synth::router_design(p, 1, 1.0);
    d.ctx_share = 0.3;
    synth::HiddenProcess h;
    h.ctx_std = 0;  // every token's hidden state is fresh
    const synth::RoutingStats s = synth::estimate_routing(d, synth::make_router(d, 5), h);
    CHECK(s.reuse_ratio() == doctest::Approx(1.0).epsilon(0.2));
  }
}

TEST_CASE("skew concentrates expert use and zero skew keeps it flat") {
  for (std::string preset : {"qwen3-30b-a3b", "tiny-deepseek2"}) {  // softmax and sigmoid gating
    CAPTURE(preset);
    synth::HiddenProcess h;
    h.n_seq = 64;
    std::vector<synth::RoutingStats> s;
    for (double skew : {0.0, 1.0, 5.0}) {
      synth::RouterDesign d = calibrated(preset.c_str(), 0, skew, h);
      s.push_back(synth::estimate_routing_fast(d, h));
    }
    CHECK(s[0].entropy_norm > 0.98);
    CHECK(s[1].entropy_norm >= 0.97);
    CHECK(s[2].entropy_norm < s[0].entropy_norm - 0.01);
    CHECK(s[2].hottest_ratio > s[0].hottest_ratio);
  }
}

TEST_CASE("group-limited selection picks experts only from the best groups") {
  synth::RouterDesign d;
  d.n_embd = 64;
  d.n_expert = 16;
  d.n_expert_used = 4;
  d.gating = synth::Gating::sigmoid;
  d.n_group = 4;
  d.n_group_used = 2;
  std::vector<float> logits(16, -3.0f), bias(16, 0.0f);
  // group 0 has one very strong expert, group 2 two good ones, group 3 two fair ones.
  logits[1] = 5;
  logits[8] = 2;
  logits[9] = 2;
  logits[12] = 1.5f;
  logits[13] = 1.5f;
  std::vector<int> chosen;
  synth::select_experts(d, logits, bias, chosen);
  std::sort(chosen.begin(), chosen.end());
  // group scores (top-2 sums): g0 = s(5)+s(-3), g2 = 2 s(2), g3 = 2 s(1.5) -> groups 2 and 3.
  CHECK(chosen == std::vector<int>{8, 9, 12, 13});
  d.n_group = 1;
  synth::select_experts(d, logits, bias, chosen);
  std::sort(chosen.begin(), chosen.end());
  CHECK(chosen == std::vector<int>{1, 8, 9, 12});
}
