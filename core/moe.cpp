// Session MoE FFN: routing (llama.cpp's build_moe_ffn) and the routed + shared experts.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/session.h"
#include "kernels/activations.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
}  // namespace

void Session::route(int64_t il, int64_t n, int64_t start_pos) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.layer(il);
  const int64_t X = c.n_expert, K = c.n_expert_used, G = c.n_expert_groups, GU = c.n_group_used;
  matmul(L.gate_inp.matrix(), cur_.data(), n, router_logits_.data());
  for (int64_t t = 0; t < n; ++t) {
    const std::span<const float> logits{router_logits_.data() + t * X, sz(X)};
    const std::span<float> probs{probs_.data() + t * X, sz(X)};
    const std::span<float> sel{sel_.data() + t * X, sz(X)};
    if (c.gating == GatingFunc::sigmoid) {
      kernels::sigmoid(logits, probs);
    } else {
      std::copy(logits.begin(), logits.end(), probs.begin());
      kernels::softmax(probs);
    }
    if (L.exp_probs_b) kernels::add(probs, L.exp_probs_b.f32(), sel);  // selection only
    else std::copy(probs.begin(), probs.end(), sel.begin());
    std::span<int32_t> groups;
    if (G > 1) {
      // group score = sum of its two best selection scores; keep the best GU groups
      const int64_t per = X / G;
      for (int64_t g = 0; g < G; ++g) {
        int32_t top2[2];
        kernels::top_k(sel.subspan(sz(g * per), sz(per)), top2);
        const double s = static_cast<double>(sel[sz(g * per + top2[0])]) + static_cast<double>(sel[sz(g * per + top2[1])]);
        group_scores_[sz(g)] = static_cast<float>(s);
      }
      groups = {route_groups_.data() + t * GU, sz(GU)};
      kernels::top_k({group_scores_.data(), sz(G)}, groups);
      for (int64_t g = 0; g < G; ++g) {
        if (std::find(groups.begin(), groups.end(), static_cast<int32_t>(g)) != groups.end()) continue;
        std::fill(sel.begin() + g * per, sel.begin() + (g + 1) * per, -std::numeric_limits<float>::infinity());
      }
    }
    const std::span<int32_t> ids{route_ids_.data() + t * K, sz(K)};
    const std::span<float> w{route_w_.data() + t * K, sz(K)};
    kernels::top_k(sel, ids);
    for (int64_t i = 0; i < K; ++i) w[sz(i)] = probs[sz(ids[sz(i)])];
    if (c.expert_weights_norm) {
      double sum = 0.0;
      for (float v : w) sum += static_cast<double>(v);
      const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
      for (float& v : w) v = v / s;
    }
    if (c.expert_weights_scale_on) {
      for (float& v : w) v *= c.expert_weights_scale;
    }
    if (observer_)
      observer_->on_routing({static_cast<int>(il), start_pos + t, ids, w, groups});
  }
}

void Session::ffn_moe(int64_t il, int64_t n, int64_t start_pos, float* out) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.layer(il);
  const int64_t X = c.n_expert, K = c.n_expert_used, E = c.n_embd, F = c.n_ff_exp;
  route(il, n, start_pos);

  // Distinct experts of the batch, ascending.
  int64_t n_list = 0;
  for (int64_t e = 0; e < X; ++e) {
    bool used = false;
    for (int64_t i = 0; i < n * K && !used; ++i) used = route_ids_[sz(i)] == e;
    if (used) expert_list_[sz(n_list++)] = static_cast<int32_t>(e);
  }
  const std::span<const int32_t> list{expert_list_.data(), sz(n_list)};
  experts_.plan(static_cast<int>(il), list);
  for (const int32_t e : list) {
    int64_t m = 0;
    for (int64_t i = 0; i < n * K; ++i) {
      if (route_ids_[sz(i)] != e) continue;
      gather_[sz(m)] = static_cast<int32_t>(i);
      std::memcpy(xe_.data() + m * E, cur_.data() + (i / K) * E, sz(E) * 4);
      ++m;
    }
    {
      ExpertPin pin(experts_, static_cast<int>(il), e);
      const ExpertWeights& w = pin.weights();
      matmul(w.up, xe_.data(), m, ue_.data());
      matmul(w.gate, xe_.data(), m, ge_.data());
      const std::span<float> g{ge_.data(), sz(m * F)};
      kernels::swiglu(g, {ue_.data(), sz(m * F)}, g);
      matmul(w.down, ge_.data(), m, de_.data());
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = gather_[sz(r)];  // t * K + slot
      kernels::scale({de_.data() + r * E, sz(E)}, route_w_[sz(i)], {expert_out_.data() + i * E, sz(E)});
    }
  }
  // Sum in routing order: ((e0 + e1) + e2) + ...
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * E;
    std::memcpy(o, expert_out_.data() + t * K * E, sz(E) * 4);
    for (int64_t k = 1; k < K; ++k)
      kernels::add({o, sz(E)}, {expert_out_.data() + (t * K + k) * E, sz(E)}, {o, sz(E)});
  }
  if (c.n_expert_shared > 0 && L.up_shexp) {
    ffn_dense(L.gate_shexp, L.up_shexp, L.down_shexp, n, sh_out_.data());
    kernels::add({out, sz(n * E)}, {sh_out_.data(), sz(n * E)}, {out, sz(n * E)});
  }
}

}  // namespace sluice::core
