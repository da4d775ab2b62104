// MoE routing of one token, as llama.cpp's build_moe_ffn computes it:
//
//   p      = softmax(logits) or sigmoid(logits)           (gating)
//   s      = p + bias   (selection only; bias = exp_probs_b, may be empty)
//   groups (n_groups > 1): experts are n_groups runs of consecutive ids; a group's score is the
//          sum of its two best s (accumulated in double, rounded to float); keep the n_group_used
//          best groups and set s = -inf for experts outside them
//   ids    = top-k of s, best first (ties: lower id); with a cache-aware RoutePolicy, the top J
//            and then cached experts of the top M (core/experts/cache_aware_routing.h)
//   w[i]   = p[ids[i]]  (unbiased)
//   norm:  w /= max(sum w, 6.103515625e-5)  (sum in double, as ggml_sum_rows)
//   scale: w *= scale
//
// No allocation; `scratch` holds 2 * n_expert + 2 * n_groups floats.
#pragma once

#include <cstdint>
#include <span>

#include "core/experts/cache_aware_routing.h"
#include "core/llama/model_config.h"

namespace sluice::core {

struct RouterParams {
  GatingFunc gating = GatingFunc::softmax;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_groups = 1;
  int64_t n_group_used = 1;
  bool norm = false;
  bool scale_on = false;
  float scale = 1.0f;
  RoutePolicy route{};  // exact unless SessionOptions::route says otherwise

  static RouterParams from_config(const ModelConfig& c);
  size_t scratch_floats() const { return static_cast<size_t>(2 * n_expert + 2 * n_groups); }
};

// logits: [n_expert]; bias: [n_expert] or empty; ids/weights: [n_expert_used];
// groups: [n_group_used] (ignored when n_groups == 1). Cache-aware routing (p.route) reads
// `cached` ([n_expert]) and uses `ranks` ([n_expert] ints) as scratch; exact routing neither.
void route_token(const RouterParams& p, std::span<const float> logits, std::span<const float> bias,
                 std::span<int32_t> ids, std::span<float> weights, std::span<int32_t> groups,
                 std::span<float> scratch, std::span<const uint8_t> cached = {}, std::span<int32_t> ranks = {});

}  // namespace sluice::core
