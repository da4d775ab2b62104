// FFNs of the kimi-k3 forward pass: the dense situ FFN (spec section 8) and the latent MoE with
// shared experts (section 9). Read h_, write ffn_out_.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/experts/expert_exchange.h"
#include "core/kimi_k3/kimi_k3_session.h"
#include "kernels/activations.h"
#include "kernels/situ.h"
#include "kernels/topk.h"

namespace sluice::core {

// down situ(gate h, up h) of n rows of h_ into `out`: the dense FFN and the shared experts.
void KimiK3Session::situ_ffn(const Tensor& gate, const Tensor& up, const Tensor& down, int64_t n_ff, int64_t n, float* out) {
  const KimiK3Config& c = model_.config();
  const size_t nf = static_cast<size_t>(n * n_ff);
  matmul(gate.matrix(), h_.data(), n, ffn_g_.data());
  matmul(up.matrix(), h_.data(), n, ffn_u_.data());
  kernels::situ({ffn_g_.data(), nf}, {ffn_u_.data(), nf}, c.situ_beta, c.situ_lin_beta, {ffn_g_.data(), nf});
  matmul(down.matrix(), ffn_g_.data(), n, out);
}

void KimiK3Session::ffn_dense(int64_t, int64_t n) {
  const KimiK3Layer& L = *layer_;
  situ_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, model_.config().n_ff, n, ffn_out_.data());
}

// Router: p = sigmoid(gate_inp h), selection by p + exp_probs_b (optionally group-limited), weights
// from the unbiased p, renormalized and scaled.
void KimiK3Session::route(int64_t il, int64_t n, int64_t start_pos) {
  const KimiK3Config& c = model_.config();
  const KimiK3Layer& L = *layer_;
  const int64_t NE = c.n_expert, k = c.n_expert_used;
  // Cache-aware routing reads which experts are in RAM once per layer and batch.
  if (!route_policy_.exact()) experts_.cached(static_cast<int>(il), route_cached_);
  matmul(L.gate_inp.matrix(), h_.data(), n, router_.data());
  kernels::sigmoid({router_.data(), static_cast<size_t>(n * NE)}, {probs_.data(), static_cast<size_t>(n * NE)});
  for (int64_t t = 0; t < n; ++t) {
    const float* p = probs_.data() + t * NE;
    float* sel = sel_.data() + t * NE;
    for (int64_t e = 0; e < NE; ++e) sel[e] = L.exp_probs_b ? p[e] + L.exp_probs_b.f32()[static_cast<size_t>(e)] : p[e];
    if (c.n_expert_groups > 1) {
      const int64_t G = c.n_expert_groups, per = NE / G;
      for (int64_t g = 0; g < G; ++g) {
        int32_t top2[2];
        kernels::top_k({sel + g * per, static_cast<size_t>(per)}, {top2, static_cast<size_t>(std::min<int64_t>(2, per))});
        group_scores_[static_cast<size_t>(g)] = sel[g * per + top2[0]] + (per > 1 ? sel[g * per + top2[1]] : 0.0f);
      }
      kernels::top_k({group_scores_.data(), static_cast<size_t>(G)}, {group_top_.data(), static_cast<size_t>(c.n_group_used)});
      for (int64_t g = 0; g < G; ++g) {
        bool keep = false;
        for (int64_t j = 0; j < c.n_group_used; ++j) keep |= group_top_[static_cast<size_t>(j)] == g;
        if (!keep)
          for (int64_t e = 0; e < per; ++e) sel[g * per + e] = -std::numeric_limits<float>::infinity();
      }
    }
    int32_t* ids = route_ids_.data() + t * k;
    float* w = route_w_.data() + t * k;
    // expert_list_ is free until ffn_moe lists the batch's experts: the ranks' scratch.
    select_experts({sel, static_cast<size_t>(NE)}, {ids, static_cast<size_t>(k)}, route_policy_, route_cached_,
                   {expert_list_.data(), static_cast<size_t>(NE)});
    double sum = 0.0;  // ggml_sum_rows accumulates in double
    for (int64_t j = 0; j < k; ++j) {
      w[j] = p[ids[j]];
      sum += static_cast<double>(w[j]);
    }
    if (c.expert_weights_norm) {
      const float denom = std::max(static_cast<float>(sum), 6.103515625e-5f);
      for (int64_t j = 0; j < k; ++j) w[j] /= denom;
    }
    if (c.expert_weights_scale != 0.0f && c.expert_weights_scale != 1.0f)
      for (int64_t j = 0; j < k; ++j) w[j] *= c.expert_weights_scale;
    if (observer_)
      observer_->on_routing({static_cast<int>(il), start_pos + t, {ids, static_cast<size_t>(k)}, {w, static_cast<size_t>(k)}, {}});
  }
}

void KimiK3Session::ffn_moe(int64_t il, int64_t n, int64_t start_pos) {
  const KimiK3Config& c = model_.config();
  const KimiK3Layer& L = *layer_;
  const int64_t k = c.n_expert_used, LW = c.expert_width(), FF = c.n_ff_exp, E = c.n_embd;
  route(il, n, start_pos);

  // Routed experts in latent space: zl = routed_down h (or h), y_e = down_e situ(gate_e zl, up_e zl).
  const float* z = h_.data();
  if (L.routed_down) {
    matmul(L.routed_down.matrix(), h_.data(), n, zl_.data());
    z = zl_.data();
  }
  // Distinct experts of the batch, ascending (with expert parallelism: those this rank owns).
  int64_t n_list = 0;
  for (int64_t e = 0; e < c.n_expert; ++e) {
    if (!computes_expert(exchange_, static_cast<int>(il), static_cast<int32_t>(e))) continue;
    bool used = false;
    for (int64_t i = 0; i < n * k && !used; ++i) used = route_ids_[static_cast<size_t>(i)] == e;
    if (used) expert_list_[static_cast<size_t>(n_list++)] = static_cast<int32_t>(e);
  }
  experts_.plan(static_cast<int>(il), {expert_list_.data(), static_cast<size_t>(n_list)});
  // The next MoE layers' likely experts, read while this one computes (u_: this block's FFN input).
  if (predictor_) predictor_->predict(il, {u_.data(), static_cast<size_t>(n * c.n_embd)}, n, experts_, pool_);
  // Experts in the order the source hands them out (resident first, then as reads land); each
  // (token, slot) output is kept apart and summed in routing order below, so the order never
  // changes the result.
  std::copy(expert_list_.begin(), expert_list_.begin() + n_list, pending_.begin());
  for (int64_t left = n_list; left > 0; --left) {
    ExpertPin pin(experts_, static_cast<int>(il), std::span<const int32_t>{pending_.data(), static_cast<size_t>(left)});
    const int32_t e = pin.expert();
    auto at = std::find(pending_.begin(), pending_.begin() + left, e);
    std::copy(at + 1, pending_.begin() + left, at);  // keep the rest in ascending order
    int64_t m = 0;  // (token, slot) pairs routed to e, as token * k + slot
    for (int64_t i = 0; i < n * k; ++i)
      if (route_ids_[static_cast<size_t>(i)] == e) gather_[static_cast<size_t>(m++)] = static_cast<int32_t>(i);
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(xe_.data() + j * LW, z + (gather_[static_cast<size_t>(j)] / k) * LW, static_cast<size_t>(LW) * sizeof(float));
    const ExpertWeights& w = pin.weights();
    matmul(w.gate, xe_.data(), m, ge_.data(), MatKind::vector);
    matmul(w.up, xe_.data(), m, ue_.data(), MatKind::vector);
    const size_t nf = static_cast<size_t>(m * FF);
    kernels::situ({ge_.data(), nf}, {ue_.data(), nf}, c.situ_beta, c.situ_lin_beta, {ge_.data(), nf});
    matmul(w.down, ge_.data(), m, ye_.data(), MatKind::vector);
    if (exchange_) exchange_->note_computed(m);  // the rank's share, printed per rank
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(expert_out_.data() + gather_[static_cast<size_t>(j)] * LW, ye_.data() + j * LW,
                  static_cast<size_t>(LW) * sizeof(float));
  }
  // Other ranks' (token, slot) latent rows (core/experts/expert_exchange.h): unweighted y_e, so
  // every rank weights and sums them below exactly as one process does. The shared experts,
  // which need none of them, compute while the rows are in flight.
  if (exchange_)
    exchange_->begin(static_cast<int>(il), {route_ids_.data(), static_cast<size_t>(n * k)}, LW,
                     {expert_out_.data(), static_cast<size_t>(n * k * LW)}, exchange_scratch_);
  if (L.gate_shexp) shared_experts(n);
  if (exchange_) exchange_->finish();
  // m = sum_j w_j y_j in routing order (llama.cpp: weighted views added one after another).
  for (int64_t t = 0; t < n; ++t) {
    float* out = moe_.data() + t * LW;
    for (int64_t j = 0; j < k; ++j) {
      const float w = route_w_[static_cast<size_t>(t * k + j)];
      const float* y = expert_out_.data() + (t * k + j) * LW;
      if (j == 0)
        for (int64_t i = 0; i < LW; ++i) out[i] = y[i] * w;
      else
        for (int64_t i = 0; i < LW; ++i) out[i] += y[i] * w;
    }
  }
  if (L.routed_norm) rms_norm(moe_.data(), L.routed_norm, n, LW, moe_.data());
  if (L.routed_up) matmul(L.routed_up.matrix(), moe_.data(), n, ffn_out_.data());
  else std::memcpy(ffn_out_.data(), moe_.data(), static_cast<size_t>(n * E) * sizeof(float));

  // Shared experts (computed above) added after the routed part, as llama.cpp does.
  if (L.gate_shexp)
    for (int64_t i = 0; i < n * E; ++i) ffn_out_[static_cast<size_t>(i)] += sh_[static_cast<size_t>(i)];
}

// Shared experts on the full-width h, into sh_.
void KimiK3Session::shared_experts(int64_t n) {
  const KimiK3Layer& L = *layer_;
  situ_ffn(L.gate_shexp, L.up_shexp, L.down_shexp, model_.config().n_ff_shexp, n, sh_.data());
}

}  // namespace sluice::core
