// KimiK3Config: hyperparameters of a GGUF `kimi-k3` model (Kimi K3: hybrid KDA linear attention +
// MLA full attention, latent MoE with shared experts, situ activation, cross-layer residual
// mixing), read as llama.cpp's llama_model_kimi_k3::load_arch_hparams reads them, and the tensors
// the forward pass needs, so a file can be checked before any weight is read.
//
// Keys (prefix "kimi-k3."; see shared/specs/kimi-k3.md section 2.1):
//   required: context_length, embedding_length, block_count, attention.layer_norm_rms_epsilon,
//             attention.kv_lora_rank, attention.key_length_mla, attention.value_length_mla,
//             ssm.conv_kernel, kda.head_dim, expert_gating_func (= 2, sigmoid),
//             expert_feed_forward_length, expert_shared_count, activation.situ_beta,
//             activation.situ_linear_beta, attn_res.block_size
//   needed in practice: attention.head_count (one value for KDA and MLA), attention.head_count_kv
//             (per-layer array: 0 marks a KDA layer, >0 an MLA layer)
//   optional: feed_forward_length, attention.q_lora_rank, rope.dimension_count (qk_rope: sizes the
//             q/k split only, K3 applies no RoPE), kda.gate_lower_bound (absent: softplus gate),
//             expert_count, expert_used_count (layer-0 value used everywhere), expert_group_count,
//             expert_group_used_count, expert_weights_scale, expert_weights_norm,
//             expert_latent_length (0/absent: experts run at n_embd), leading_dense_block_count.
//
// Shapes are ggml order (ne[0] contiguous). Real K3 / tiny reference:
//   KDA  attn_q/k/v [n_embd, n_head*d_h] [7168, 12288] / [256, 256]; ssm_conv1d_* [d_conv, 1, d_inner(, 1)]
//   MLA  attn_kv_a_mqa [n_embd, kv_lora + qk_rope] [7168, 576]; attn_k_b [qk_nope, kv_lora, n_head]
//   MoE  ffn_gate_exps [n_lat, n_ff_exp, n_expert] [3584, 3072, 896]; ffn_routed_down [n_embd, n_lat]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"

namespace sluice::core {

struct KimiK3Config {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;
  int64_t n_head = 0;                  // KDA and MLA heads
  std::vector<int64_t> n_head_kv;      // per layer; 0 = KDA layer
  float rms_eps = 1e-5f;

  // KDA
  int64_t d_conv = 0;
  int64_t kda_head_dim = 0;            // d_h
  float gate_lower_bound = 0.0f;       // -inf: softplus (kimi-linear) gate
  int64_t d_inner() const { return n_head * kda_head_dim; }

  // MLA (absorbed, no RoPE)
  int64_t q_lora_rank = 0;             // 0: plain attn_q (decided by attn_q_a_norm's presence)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope = 0;
  int64_t qk_rope = 0;
  int64_t v_head_dim = 0;
  float kq_scale = 1.0f;               // 1/sqrt(qk_nope + qk_rope)
  int64_t mla_row() const { return kv_lora_rank + qk_rope; }  // one cached [c | k_pe] row

  // FFN
  int64_t n_ff = 0;                    // dense layers
  int64_t n_layer_dense_lead = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_expert_shared = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;              // n_ff_exp * max(n_expert_shared, 1)
  int64_t n_latent = 0;                // expert_latent_length; 0: experts at n_embd
  int64_t n_expert_groups = 1;
  int64_t n_group_used = 1;
  bool expert_weights_norm = false;
  float expert_weights_scale = 0.0f;   // applied when != 0 and != 1
  float situ_beta = 0.0f;
  float situ_lin_beta = 0.0f;

  int64_t res_block_size = 0;          // attn_res.block_size; 0: no residual mixing

  static KimiK3Config from_gguf(const GgufFile& file);

  bool is_kda(int64_t il) const { return n_head_kv[static_cast<size_t>(il)] == 0; }
  bool is_moe_layer(int64_t il) const { return il >= n_layer_dense_lead; }
  bool banks(int64_t il) const { return res_block_size > 0 && il % res_block_size == 0; }
  int64_t expert_width() const { return n_latent > 0 ? n_latent : n_embd; }
  int64_t n_kda_layers() const;
  int64_t n_mla_layers() const;
  // Checkpoints the residual stack holds after the last layer (0 without mixing).
  int64_t n_checkpoints() const;

  // Recurrent state per sequence, f32 floats: conv [3][d_conv-1][d_inner] + S [n_head][d_h][d_h]
  // per KDA layer (llama.cpp n_embd_r() + n_embd_s()).
  int64_t conv_state_floats() const { return 3 * (d_conv - 1) * d_inner(); }
  int64_t ssm_state_floats() const { return n_head * kda_head_dim * kda_head_dim; }
  std::string describe() const;
};

struct KimiK3TensorSpec {
  std::string name;
  std::vector<int64_t> ne;  // trailing 1s are ignored when matching
  bool required = true;
};

// Every tensor the forward pass reads, with its expected shape.
std::vector<KimiK3TensorSpec> kimi_k3_tensors(const KimiK3Config& config, const GgufFile& file);

// Throws Error(invalid_file) for a missing required tensor ("missing tensor 'x'") or a wrong shape
// ("tensor 'x' has shape [..], expected [..]"), Error(unsupported) for a type the kernels cannot
// compute on.
void check_kimi_k3_tensors(const KimiK3Config& config, const GgufFile& file);

}  // namespace sluice::core
