// Shapes of real Mixture-of-Experts models, for `sluice synth`.
//
// A preset carries a published model's hyperparameters exactly as its config.json states them and
// as llama.cpp's converter writes them into GGUF keys. `sluice synth` only ever reduces the layer
// count (and optionally the routed expert count), so every tensor that remains has the real
// per-layer shape: one expert shard, one IO, one dense layer weigh what they weigh in the real
// model.
//
// Architectures and the tensors each layer carries (ggml dims, ne[0] first):
//   deepseek2 (MLA; Kimi K2, DeepSeek-V3)
//     attn_norm [n_embd]  attn_q_a [n_embd, q_lora]  attn_q_a_norm [q_lora]
//     attn_q_b [q_lora, n_head*(nope+rope)]  attn_kv_a_mqa [n_embd, kv_lora+rope]
//     attn_kv_a_norm [kv_lora]  attn_k_b [nope, kv_lora, n_head]  attn_v_b [kv_lora, v_head, n_head]
//     attn_output [n_head*v_head, n_embd]  ffn_norm [n_embd]
//     dense blocks (the first n_layer_dense_lead): ffn_gate/ffn_up [n_embd, n_ff], ffn_down [n_ff, n_embd]
//     MoE blocks: ffn_gate_inp [n_embd, n_expert] F32, exp_probs_b.bias [n_expert] F32,
//       ffn_gate_exps/ffn_up_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps [n_ff_exp, n_embd, n_expert],
//       ffn_gate_shexp/ffn_up_shexp [n_embd, n_ff_exp*n_shared], ffn_down_shexp [n_ff_exp*n_shared, n_embd]
//   qwen3moe: attn_norm, attn_q [n_embd, n_head*head], attn_k/attn_v [n_embd, n_head_kv*head],
//     attn_q_norm/attn_k_norm [head], attn_output [n_head*head, n_embd], ffn_norm, ffn_gate_inp, *_exps
//   llama (Mixtral): as qwen3moe without q/k norms.
//   kimi-k3 (Kimi K3; shared/reference/kimi-k3): hybrid blocks, MLA where
//     is_mla_block(i) (every 4th block and the last), KDA linear attention elsewhere;
//     attention.head_count_kv is the per-block array [0 KDA / 1 MLA]. Every block: attn_norm,
//     ffn_norm, attn_res_score, ffn_res_score [n_embd]. KDA (d_inner = n_head*kda_head_dim):
//     ssm_conv1d_{q,k,v} [conv_kernel, 1, d_inner] F32, attn_q/attn_k/attn_v [n_embd, d_inner],
//     ssm_f_a [n_embd, kda_head_dim], ssm_f_b [kda_head_dim, d_inner], ssm_beta [n_embd, n_head],
//     ssm_a [n_head], ssm_dt.bias [d_inner], ssm_g [n_embd, d_inner], ssm_norm [kda_head_dim],
//     attn_output [d_inner, n_embd]. MLA: the deepseek2 tensors plus attn_gate
//     [n_embd, n_head*v_head]. Latent MoE: *_exps work in the latent space ([n_latent, n_ff_exp,
//     n_expert], down [n_ff_exp, n_latent, n_expert]) between ffn_routed_down [n_embd, n_latent],
//     ffn_routed_norm [n_latent] and ffn_routed_up [n_latent, n_embd]; shared experts as deepseek2.
//     Global: output_res_score [n_embd].
//   Every model: token_embd [n_embd, n_vocab], output_norm [n_embd], output [n_embd, n_vocab].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::core::synth {

enum class Arch { deepseek2, qwen3moe, llama, kimi_k3 };
enum class Gating { softmax, sigmoid };

struct Preset {
  std::string name;        // "kimi-k2"
  std::string model_name;  // "Kimi-K2-Instruct"
  Arch arch = Arch::llama;
  std::string arch_name;   // general.architecture
  std::string default_quant = "Q4_K_M";  // --quant when none is given (the type mix the real files ship)
  uint32_t n_layer = 0;    // the real model's block count
  uint32_t n_layer_dense_lead = 0;
  uint32_t n_embd = 0;
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_head = 0, n_head_kv = 0;
  uint32_t head_dim = 0;   // qwen3moe/llama: key and value length
  // MLA (deepseek2)
  uint32_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // FFN
  uint32_t n_ff = 0;       // dense FFN width (feed_forward_length)
  uint32_t n_ff_exp = 0;   // routed expert width (llama: = n_ff)
  uint32_t n_expert = 0, n_expert_used = 0, n_expert_shared = 0;
  uint32_t n_group = 0, n_group_used = 0;  // deepseek2 group-limited routing (0: key absent)
  Gating gating = Gating::softmax;
  float expert_weights_scale = 1.0f;
  bool expert_weights_norm = true;
  // RoPE
  float rope_freq_base = 10000.0f;
  uint32_t rope_dim = 0;   // rope.dimension_count (0: key absent)
  float yarn_factor = 0.0f;  // 0: no rope.scaling keys
  uint32_t yarn_orig_ctx = 0;
  float yarn_log_multiplier = 0.0f;
  float rms_eps = 1e-6f;
  // kimi-k3
  uint32_t kda_head_dim = 0, ssm_conv_kernel = 0, n_latent = 0, attn_res_block_size = 0;
  float kda_gate_lower_bound = 0.0f, situ_beta = 0.0f, situ_linear_beta = 0.0f;
  // Tokenizer defaults for the built-in vocabulary.
  std::string tokenizer_pre;   // tokenizer.ggml.pre
  bool add_bos = false;
  std::string chat_template;   // embedded copy, may be empty

  uint32_t n_moe_layers() const { return n_layer > n_layer_dense_lead ? n_layer - n_layer_dense_lead : 0; }
  // kimi-k3: full (MLA) attention in blocks 3, 7, 11, ... and the last block; KDA elsewhere.
  bool is_mla_block(uint32_t i) const { return arch != Arch::kimi_k3 || i % 4 == 3 || i + 1 == n_layer; }
};

// The known presets: kimi-k2, kimi-k3, deepseek-v3, qwen3-30b-a3b, qwen3-235b-a22b,
// mixtral-8x7b, and tiny-deepseek2, tiny-qwen3moe, tiny-llama-moe, tiny-kimi-k3 with the shapes
// of shared/reference/tiny and shared/reference/kimi-k3.
const std::vector<Preset>& presets();
// Throws Error(invalid_argument) "--preset: unknown preset 'x' (known: ...)".
const Preset& find_preset(std::string_view name);
std::string preset_names();

// The preset reduced to `layers` blocks (1 to the real count) and `experts` routed experts (0: keep). The
// dense lead blocks are kept as long as at least one MoE block remains (kimi-k2 --layers 4: 1
// dense + 3 MoE; deepseek-v3 --layers 2: 1 dense + 1 MoE). n_expert_used and the expert groups
// shrink with the expert count when they no longer fit. Throws Error(invalid_argument) on layers
// or experts out of range. `expert_ff` (0: keep) narrows every expert, routed and shared, to that FF
// width, a multiple of 256 (the k-quant block) no wider than the model's: K2's real hidden size with
// small experts makes a file of a chosen size that keeps the model's depth and expert count.
Preset reduce(const Preset& p, uint32_t layers, uint32_t experts, uint32_t expert_ff = 0);

// Embedded chat templates (Jinja text as the publishers ship them).
std::string_view kimi_k2_chat_template();
std::string_view kimi_k3_chat_template();
std::string_view deepseek_v3_chat_template();
std::string_view qwen3_chat_template();
std::string_view mixtral_chat_template();

}  // namespace sluice::core::synth
