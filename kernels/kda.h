// KDA (Kimi Delta Attention): the gated delta-rule recurrence of Kimi K3's linear-attention
// layers, and the small per-head ops around it, as llama.cpp's CPU backend computes them
// (ggml GATED_DELTA_NET, build_gdn_l2_norm, build_kda_layer).
//
// Shapes: H heads of D = d_h values; per-token tensors are [n_tokens][H][D] row-major, f32.
//
// State per head is S in R^{D x D}, S[i][j] with i a KEY component and j a VALUE component. It is
// stored TRANSPOSED, as llama.cpp stores it: flat index h*D*D + j*D + i holds S_h[i][j] (one row
// per value component, keys contiguous). A new sequence starts from zeros. Size per layer and
// sequence: H*D*D floats (llama.cpp n_embd_s()).
//
// For each token t, in order (the exact semantics of the fused CPU kernel):
//   S     <- diag(exp(g_t)) S          decay per KEY channel, before the update
//   delta  = beta_t * (v_t - S^T k_t)
//   S     <- S + k_t delta^T
//   o_t    = S^T q_t * scale           the UPDATED state; scale = 1/sqrt(D)
// q and k are expected L2-normalized already (kda_l2_norm). Because the transposed layout makes
// each value component j an independent row, the kernel runs row by row: decay, dot with k,
// rank-1 update, dot with q. The dots and the update use ggml's AVX-512 accumulation order and FMA
// (emulated in scalar), which makes the output bit-identical to llama.cpp's reference run.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/thread_pool.h"

namespace sluice::kernels {

// x <- x / sqrt(sum(x^2) + eps) over each row of D values, computed as llama.cpp does:
// rms_norm(x, eps / D) (sum of squares in double) followed by a scale of 1/sqrt(D).
void kda_l2_norm(std::span<float> x, int64_t D, float eps);

// K3's decay gate (kda.gate_lower_bound present): g = lb * sigmoid(-a_h * z), per element, where
// `a` [H] holds ssm_a = -exp(A_log) (so -a_h > 0) and z [n_tokens][H][D] already includes dt_bias.
// Without a lower bound (kimi-linear, lb = -inf): g = a_h * softplus(z).
void kda_decay_gate(std::span<const float> z, std::span<const float> a, float lb, int64_t H, int64_t D,
                    std::span<float> g);

// The recurrence above over n_tokens tokens; state [H][D][D] is read and updated in place.
// beta is [n_tokens][H]; out [n_tokens][H][D]. `exp_g` is caller scratch of g.size() floats
// (exp(g) is computed once, not once per value row). (head, value row) pairs run in parallel on
// the pool; results do not depend on the thread count.
void kda_recurrence(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                    std::span<const float> g, std::span<const float> beta, std::span<float> state,
                    int64_t n_tokens, int64_t H, int64_t D, float scale, std::span<float> out,
                    std::span<float> exp_g, ThreadPool& pool);

}  // namespace sluice::kernels
