#include "core/llama/router.h"

#include <algorithm>
#include <limits>

#include "kernels/activations.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

RouterParams RouterParams::from_config(const ModelConfig& c) {
  RouterParams p;
  p.gating = c.gating;
  p.n_expert = c.n_expert;
  p.n_expert_used = c.n_expert_used;
  p.n_groups = c.n_expert_groups;
  p.n_group_used = c.n_group_used;
  p.norm = c.expert_weights_norm;
  p.scale_on = c.expert_weights_scale_on;
  p.scale = c.expert_weights_scale;
  return p;
}

void route_token(const RouterParams& p, std::span<const float> logits, std::span<const float> bias,
                 std::span<int32_t> ids, std::span<float> w, std::span<int32_t> groups, std::span<float> scratch,
                 std::span<const uint8_t> cached, std::span<int32_t> ranks) {
  const size_t X = static_cast<size_t>(p.n_expert);
  const size_t G = static_cast<size_t>(p.n_groups);
  const std::span<float> probs = scratch.subspan(0, X);
  const std::span<float> sel = scratch.subspan(X, X);
  const std::span<float> group_scores = scratch.subspan(2 * X, G);
  if (p.gating == GatingFunc::sigmoid) {
    kernels::sigmoid(logits, probs);
  } else {
    std::copy(logits.begin(), logits.end(), probs.begin());
    kernels::softmax(probs);
  }
  if (!bias.empty()) kernels::add(probs, bias, sel);
  else std::copy(probs.begin(), probs.end(), sel.begin());
  if (G > 1) {
    const size_t per = X / G;
    for (size_t g = 0; g < G; ++g) {
      int32_t top2[2];
      const std::span<const float> run = sel.subspan(g * per, per);
      kernels::top_k(run, top2);
      const double s = static_cast<double>(run[static_cast<size_t>(top2[0])]) +
                       static_cast<double>(run[static_cast<size_t>(top2[1])]);
      group_scores[g] = static_cast<float>(s);
    }
    kernels::top_k(group_scores, groups);
    for (size_t g = 0; g < G; ++g) {
      if (std::find(groups.begin(), groups.end(), static_cast<int32_t>(g)) != groups.end()) continue;
      std::fill(sel.begin() + static_cast<ptrdiff_t>(g * per), sel.begin() + static_cast<ptrdiff_t>((g + 1) * per),
                -std::numeric_limits<float>::infinity());
    }
  }
  select_experts(sel, ids, p.route, cached, ranks);
  for (size_t i = 0; i < ids.size(); ++i) w[i] = probs[static_cast<size_t>(ids[i])];
  if (p.norm) {
    double sum = 0.0;
    for (float v : w) sum += static_cast<double>(v);
    const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (float& v : w) v = v / s;
  }
  if (p.scale_on) {
    for (float& v : w) v *= p.scale;
  }
}

}  // namespace sluice::core
