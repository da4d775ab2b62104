// KDA layer of the kimi-k3 forward pass (spec section 6): reads h_, writes a_.
#include <cmath>

#include "core/kimi_k3/kimi_k3_session.h"
#include "kernels/activations.h"
#include "kernels/kda.h"
#include "kernels/kda_chunked.h"
#include "kernels/short_conv.h"

namespace sluice::core {

void KimiK3Session::kda(int64_t il, int64_t n) {
  const KimiK3Config& c = model_.config();
  const KimiK3Layer& L = *layer_;
  const int64_t DI = c.d_inner(), H = c.n_head, D = c.kda_head_dim, K = c.d_conv;
  const size_t nd = static_cast<size_t>(n * DI);
  float* conv_state = state_->conv(il);  // [q | k | v] blocks of [DI][K-1]

  // q, k, v: projection, causal depthwise conv over [state | batch], silu.
  const Tensor* w[3] = {&L.wq, &L.wk, &L.wv};
  const Tensor* taps[3] = {&L.conv_q, &L.conv_k, &L.conv_v};
  for (int x = 0; x < 3; ++x) {
    matmul(w[x]->matrix(), h_.data(), n, proj_.data());
    kernels::short_conv({proj_.data(), nd}, taps[x]->f32(), {conv_state + x * DI * (K - 1), static_cast<size_t>(DI * (K - 1))},
                        n, DI, K, {conv_out_[x].data(), nd}, conv_win_);
    kernels::silu({conv_out_[x].data(), nd}, {conv_out_[x].data(), nd});  // ggml_v_expf blocks; DI % 16 == 0
  }
  float* q = conv_out_[0].data();
  float* k = conv_out_[1].data();
  const float* v = conv_out_[2].data();

  // Decay gate g = lb * sigmoid(exp(A_log) * (f_b f_a h + dt_bias)), beta = sigmoid(w_beta h).
  matmul(L.f_a.matrix(), h_.data(), n, fa_.data());
  matmul(L.f_b.matrix(), fa_.data(), n, z_.data());
  const std::span<const float> dt = L.dt_bias.f32();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < DI; ++i) z_[static_cast<size_t>(t * DI + i)] += dt[static_cast<size_t>(i)];
  kernels::kda_decay_gate({z_.data(), nd}, L.ssm_a.f32(), c.gate_lower_bound, H, D, {g_.data(), nd});
  // llama.cpp meets this [n_embd, n_head] product on ggml's vector path, not tinyBLAS (F32 and F16
  // logits bit-exact on the tiny model; not checked for n_head > 2).
  matmul(L.w_beta.matrix(), h_.data(), n, beta_.data(), MatKind::vector);
  kernels::sigmoid({beta_.data(), static_cast<size_t>(n * H)}, {beta_.data(), static_cast<size_t>(n * H)});

  // Per-head L2 norm of q and k, then the gated delta rule over the batch.
  kernels::kda_l2_norm({q, nd}, D, c.rms_eps);
  kernels::kda_l2_norm({k, nd}, D, c.rms_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::span<float> S{state_->ssm(il), static_cast<size_t>(c.ssm_state_floats())};
  const std::span<const float> bt{beta_.data(), static_cast<size_t>(n * H)};
  if (chunked_kda_ && n > 1)
    kernels::kda_chunked({q, nd}, {k, nd}, {v, nd}, {g_.data(), nd}, bt, S, n, H, D, scale, kernels::kKdaChunk,
                         {o_.data(), nd}, chunk_scratch_, pool_);
  else
    kernels::kda_recurrence({q, nd}, {k, nd}, {v, nd}, {g_.data(), nd}, bt, S, n, H, D, scale, {o_.data(), nd},
                            {exp_g_.data(), nd}, pool_);

  // Output: per-head RMS norm (shared weight), sigmoid gate from ssm_g h, attn_output.
  matmul(L.w_g.matrix(), h_.data(), n, g2_.data());
  rms_norm(o_.data(), L.ssm_norm, n * H, D, o_.data());
  kernels::sigmoid({g2_.data(), nd}, {g2_.data(), nd});
  for (size_t i = 0; i < nd; ++i) o_[i] *= g2_[i];
  matmul(L.wo.matrix(), o_.data(), n, a_.data());
}

}  // namespace sluice::core
