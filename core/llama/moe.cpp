// Session MoE FFN: routing (llama.cpp's build_moe_ffn) and the routed + shared experts.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/experts/expert_exchange.h"
#include "core/llama/router.h"
#include "core/llama/session.h"
#include "kernels/activations.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
}  // namespace

void LlamaSession::route(int64_t il, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = *layer_;
  const int64_t X = c.n_expert, K = c.n_expert_used, GU = c.n_group_used;
  RouterParams params = RouterParams::from_config(c);
  params.route = route_policy_;
  // Cache-aware routing reads which experts are in RAM once per layer and batch.
  if (!params.route.exact()) experts_.cached(static_cast<int>(il), route_cached_);
  matmul(L.gate_inp.matrix(), cur_.data(), n, router_logits_.data());
  const std::span<const float> bias = L.exp_probs_b ? L.exp_probs_b.f32() : std::span<const float>{};
  for (int64_t t = 0; t < n; ++t) {
    const std::span<int32_t> ids{route_ids_.data() + t * K, sz(K)};
    const std::span<float> w{route_w_.data() + t * K, sz(K)};
    const std::span<int32_t> groups{route_groups_.data() + t * GU, params.n_groups > 1 ? sz(GU) : 0};
    // expert_list_ is free until ffn_moe lists the batch's experts: the ranks' scratch.
    route_token(params, {router_logits_.data() + t * X, sz(X)}, bias, ids, w, groups, router_scratch_, route_cached_,
                {expert_list_.data(), sz(X)});
    if (observer_) observer_->on_routing({static_cast<int>(il), pos_[sz(t)], ids, w, groups});
  }
}

std::span<const int64_t> LlamaSession::expert_runs(int64_t n, int64_t m) {
  if (runs_.size() <= 2 || runs_n_ != n) return {};
  split_rows_by_run(runs_, {gather_.data(), sz(m)}, model_.config().n_expert_used, expert_runs_);
  return expert_runs_;
}

void LlamaSession::ffn_moe(int64_t il, int64_t n, float* out) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = *layer_;
  const int64_t X = c.n_expert, K = c.n_expert_used, E = c.n_embd, F = c.n_ff_exp;
  route(il, n);

  // Distinct experts of the batch, ascending (with expert parallelism: those this rank owns).
  int64_t n_list = 0;
  for (int64_t e = 0; e < X; ++e) {
    if (!computes_expert(exchange_, static_cast<int>(il), static_cast<int32_t>(e))) continue;
    bool used = false;
    for (int64_t i = 0; i < n * K && !used; ++i) used = route_ids_[sz(i)] == e;
    if (used) expert_list_[sz(n_list++)] = static_cast<int32_t>(e);
  }
  const std::span<const int32_t> list{expert_list_.data(), sz(n_list)};
  experts_.plan(static_cast<int>(il), list);
  // Demand reads are out; now guess the next layers' experts so their reads overlap this compute.
  if (predictor_) predictor_->predict(il, {x_.data(), sz(n * E)}, n, experts_, pool_);
  // The shared expert needs no read: computing it now keeps the CPU busy while the misses land
  // (with an exchange it overlaps the exchange instead, below). Its output is added after the
  // routed sum either way, so the result does not change.
  const bool shared = c.n_expert_shared > 0 && L.up_shexp;
  if (shared && !exchange_) ffn_dense(L.gate_shexp, L.up_shexp, L.down_shexp, n, sh_out_.data());
  // Experts in the order the source hands them out (resident first, then as reads land). Each
  // (token, slot) output is kept apart and summed in routing order below, so the order in which
  // experts run never changes the result.
  std::copy(list.begin(), list.end(), pending_.begin());
  for (int64_t left = n_list; left > 0; --left) {
    {
      ExpertPin pin(experts_, static_cast<int>(il), std::span<const int32_t>{pending_.data(), sz(left)});
      const int32_t e = pin.expert();
      auto at = std::find(pending_.begin(), pending_.begin() + left, e);
      std::copy(at + 1, pending_.begin() + left, at);  // keep the rest in ascending order
      int64_t m = 0;
      for (int64_t i = 0; i < n * K; ++i)
        if (route_ids_[sz(i)] == e) gather_[sz(m++)] = static_cast<int32_t>(i);
      for_rows(m, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          std::memcpy(xe_.data() + r * E, cur_.data() + (gather_[sz(r)] / K) * E, sz(E) * 4);
      });
      const ExpertWeights& w = pin.weights();
      const std::span<const int64_t> runs = expert_runs(n, m);
      core::matmul(w.up, xe_.data(), m, ue_.data(), MatKind::vector, mm_scratch_, pool_, offload_, runs);
      core::matmul(w.gate, xe_.data(), m, ge_.data(), MatKind::vector, mm_scratch_, pool_, offload_, runs);
      const std::span<float> g{ge_.data(), sz(m * F)};
      kernels::swiglu(g, {ue_.data(), sz(m * F)}, g);
      core::matmul(w.down, ge_.data(), m, de_.data(), MatKind::vector, mm_scratch_, pool_, offload_, runs);
      if (exchange_) exchange_->note_computed(m);  // the rank's share, printed per rank
      for_rows(m, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t i = gather_[sz(r)];  // t * K + slot
          kernels::scale({de_.data() + r * E, sz(E)}, route_w_[sz(i)], {expert_out_.data() + i * E, sz(E)});
        }
      });
    }
  }
  // Other ranks' (token, slot) rows (core/experts/expert_exchange.h), in flight while the shared
  // expert computes.
  if (exchange_) {
    exchange_->begin(static_cast<int>(il), {route_ids_.data(), sz(n * K)}, E, {expert_out_.data(), sz(n * K * E)},
                     exchange_scratch_);
    if (shared) ffn_dense(L.gate_shexp, L.up_shexp, L.down_shexp, n, sh_out_.data());
    exchange_->finish();
  }
  // Sum in routing order: ((e0 + e1) + e2) + ...
  for_rows(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = out + t * E;
      std::memcpy(o, expert_out_.data() + t * K * E, sz(E) * 4);
      for (int64_t k = 1; k < K; ++k)
        kernels::add({o, sz(E)}, {expert_out_.data() + (t * K + k) * E, sz(E)}, {o, sz(E)});
      if (shared) kernels::add({o, sz(E)}, {sh_out_.data() + t * E, sz(E)}, {o, sz(E)});
    }
  });
}

}  // namespace sluice::core
