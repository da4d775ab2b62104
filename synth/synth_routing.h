// Router design for synthetic models, and an offline estimator of the routing statistics.
//
// Goal (shared/traces/README.md, real routing): per layer, near-uniform expert use (normalized
// entropy >= 0.97, hottest expert <= 2.5x its uniform share) and temporal locality: a token
// reuses the previous token's experts at the same layer 1.5x-3x more often than two random tokens
// do (FLAME-MoE: 0.22 vs 0.09, Mixtral: 0.39 vs 0.27). Random weights give uniform use for free;
// locality needs a router input that changes slowly from token to token.
//
// The hidden-state model. The residual stream of a random-weight model is dominated by the
// token's embedding (N(0,1) per dim, fresh for every token). Attention adds an average of value
// vectors over the context, which changes slowly: consecutive positions share almost all of their
// context. The generator makes that signal visible to the router on purpose:
//   - MoE layer l owns a context subspace S_l: `ctx_dims` (32) consecutive hidden dims starting at
//     (l * ctx_dims) mod n_embd;
//   - layer l's attn_output rows for the dims of S_l are scaled up (attn_output_ctx_std) so that the
//     attention average lands in S_l with a per-dim std of about `ctx_std` (assuming ~8 effective
//     positions in the average);
//   - the router of layer l reads all dims with small random weights (the token part) plus S_l
//     with larger random weights (the context part). The share of logit variance from the context
//     part, `ctx_share`, sets the temporal reuse; the total logit std is `logit_std` (3, as in the
//     reference models);
//   - `skew` (--skew) concentrates use: sigmoid models (deepseek2) get exp_probs_b = skew * 0.1 *
//     N(0,1) in units of the score spread at the selection threshold (sigmoid'(q) * logit_std, q
//     the logit of the k-th best of n experts), i.e. like shifting each expert's logit by
//     skew * 0.1 * logit_std * N(0,1); softmax models get per-expert router row gains
//     exp(skew * 0.06 * N(0,1)). skew 0 gives uniform expected use.
// The estimator samples that process: per sequence, the context part c_t in S_l is an AR(1) with
// coefficient `rho` (0.95) and stationary per-dim std `ctx_std`; the token part is fresh N(0,1)
// in every dim; x_t = rms_norm(h_t); logits = W x_t; experts are selected with the preset's
// gating (softmax top-k; sigmoid + exp_probs_b, with group-limited selection when n_group > 1).
// This is a model of a forward pass, not a forward pass: `sluice bench` measures the real
// routing of a generated file. A first check with the model branch's forward pass (F16 files,
// 8 sequences x 256 random token ids, per MoE layer: entropy / reuse over chance):
//   tiny-qwen3moe   layer 0: 0.980 / 1.39x   layer 1: 0.972 / 2.28x
//   tiny-deepseek2  layer 1: 0.989 / 1.29x   layer 2: 0.977 / 2.15x
//   tiny-llama-moe  layer 0: 0.983 / 1.17x   layer 1: 0.954 / 1.49x  (4 experts: chance is 0.5)
//   qwen3-30b-a3b --layers 2 --experts 32 (real n_embd 2048; 4 x 128 tokens):
//                   layer 0: 0.982 / 1.57x   layer 1: 0.943 / 1.53x
// The first MoE layer reuses less than the process model predicts (its attention averages fresh
// token embeddings only); deeper layers land in the real band. Without the context rows and the
// broad attention (synth.h) the same check gave 1.0x-1.4x.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "synth/synth_preset.h"

namespace sluice::core::synth {

struct HiddenProcess {
  double ctx_std = 2.0;     // per-dim std of the context part in S_l
  double rho = 0.95;        // token-to-token correlation of the context part
  uint32_t n_seq = 32;      // sequences sampled
  uint32_t n_tok = 64;      // tokens per sequence
  uint64_t seed = 1;
};

struct RouterDesign {
  uint32_t n_embd = 0;
  uint32_t n_expert = 0, n_expert_used = 0;
  Gating gating = Gating::softmax;
  uint32_t n_group = 0, n_group_used = 0;
  uint32_t ctx_dim0 = 0, ctx_dims = 32;  // S_l = [ctx_dim0, ctx_dim0 + ctx_dims)
  double logit_std = 3.0;
  double ctx_share = 0.0;                // fraction of logit variance carried by the context
  double skew = 1.0;
  double ctx_std = 2.0;                  // what the weights assume about the context magnitude
};

// The design for MoE layer `moe_layer` of preset p (ctx_share left at 0; see calibrate_ctx_share).
RouterDesign router_design(const Preset& p, uint32_t moe_layer, double skew);

// Router weights, expert-major: w[e * n_embd + i] (= ggml ffn_gate_inp [n_embd, n_expert]), and
// the selection bias (n_expert values; all zero for softmax gating).
struct RouterWeights {
  std::vector<float> w;
  std::vector<float> bias;
};
RouterWeights make_router(const RouterDesign& d, uint64_t seed);

struct RoutingStats {
  double entropy_norm = 0;    // entropy of expert use / log(n_expert)
  double hottest_ratio = 0;   // hottest expert's share / (1 / n_expert)
  double reuse = 0;           // |experts(t) & experts(t-1)| / k, mean over t >= 1
  double reuse_shuffled = 0;  // the same between random token pairs (chance level)
  double reuse_ratio() const { return reuse_shuffled > 0 ? reuse / reuse_shuffled : 0; }
};

// Expert selection with the design's gating: the k chosen ids (order unspecified).
void select_experts(const RouterDesign& d, std::span<const float> logits, std::span<const float> bias,
                    std::vector<int>& chosen);

// Samples the hidden-state process above, routes every token through `r`, and measures.
RoutingStats estimate_routing(const RouterDesign& d, const RouterWeights& r, const HiddenProcess& h);

// The same statistics straight from the logit distribution that the weights induce (token part
// i.i.d. per expert, context part = U c_t with U random), without materializing W: cheap enough
// to search over ctx_share.
RoutingStats estimate_routing_fast(const RouterDesign& d, const HiddenProcess& h);

// Smallest ctx_share whose fast estimate reaches `target_ratio` reuse over chance (bisection);
// the default target 2.2 sits in the middle of the 1.5x-3x band of real models.
double calibrate_ctx_share(RouterDesign d, const HiddenProcess& h, double target_ratio = 2.2);

}  // namespace sluice::core::synth
