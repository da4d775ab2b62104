// ModelConfig: one architecture's hyperparameters, read from GGUF metadata, and the tensors it
// needs (names and ggml shapes) so a file can be checked before any weight is read.
//
// Supported architectures (GGUF `general.architecture`):
//   llama      dense, or Mixtral-style MoE when `llama.expert_count` > 0 (stacked *_exps tensors);
//              GQA, NORM RoPE, softmax routing + renormalized top-k.
//   qwen3moe   GQA with per-head q/k RMSNorm, NEOX RoPE, softmax routing + renormalized top-k.
//   deepseek2  MLA (with or without q_lora; split attn_k_b/attn_v_b or the older attn_kv_b),
//              YaRN on the rope part, leading dense blocks, routed + shared experts, softmax or
//              sigmoid gating, exp_probs_b selection bias, group-limited top-k, weight
//              renormalization and scaling.
// Keys are read as llama.cpp's loader reads them (same defaults), prefixed with "<arch>.".
//
// Shapes are in ggml order (ne[0] is the contiguous row). Example, deepseek2 layer 1:
//   blk.1.attn_q_b.weight      [q_lora_rank, n_head * (qk_nope + qk_rope)]
//   blk.1.attn_k_b.weight      [qk_nope, kv_lora_rank, n_head]
//   blk.1.ffn_up_exps.weight   [n_embd, n_ff_exp, n_expert]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "kernels/rope.h"

namespace sluice::core {

enum class Arch { llama, qwen3moe, deepseek2 };

// llama.cpp's llama_expert_gating_func_type numbering (GGUF `expert_gating_func`).
enum class GatingFunc : uint32_t { softmax = 1, sigmoid = 2 };

struct ModelConfig {
  Arch arch = Arch::llama;
  std::string arch_name;  // as in the file

  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;  // GQA: per-head q/k size
  int64_t head_dim_v = 0;  // GQA: per-head v size
  float rms_eps = 1e-5f;
  kernels::RopeParams rope;  // n_dims = n_rot
  float kq_scale = 1.0f;     // softmax scale applied to q.k

  // FFN
  int64_t n_ff = 0;            // dense FFN width (dense layers)
  int64_t n_ff_exp = 0;        // one routed expert's width
  int64_t n_ff_shexp = 0;      // all shared experts together (n_ff_exp * n_expert_shared)
  int64_t n_expert = 0;        // 0: dense model
  int64_t n_expert_used = 0;
  int64_t n_expert_shared = 0;
  int64_t n_layer_dense_lead = 0;
  int64_t n_expert_groups = 1;   // > 1: group-limited routing
  int64_t n_group_used = 1;
  GatingFunc gating = GatingFunc::softmax;
  bool expert_weights_norm = false;
  bool expert_weights_scale_on = false;  // deepseek2 always scales
  float expert_weights_scale = 1.0f;

  // MLA (deepseek2)
  int64_t q_lora_rank = 0;  // 0: plain attn_q
  int64_t kv_lora_rank = 0;
  int64_t qk_nope = 0;
  int64_t qk_rope = 0;
  int64_t v_head_dim = 0;
  bool mla_split_kv_b = true;  // file has attn_k_b/attn_v_b (false: attn_kv_b)

  static ModelConfig from_gguf(const GgufFile& file);

  bool is_mla() const { return arch == Arch::deepseek2; }
  bool is_moe_layer(int64_t il) const { return n_expert > 0 && il >= n_layer_dense_lead; }
  // Floats per position per layer in the KV cache: K row and V row (MLA: V is part of K).
  int64_t k_row() const { return is_mla() ? kv_lora_rank + qk_rope : n_head_kv * head_dim_k; }
  int64_t v_row() const { return is_mla() ? 0 : n_head_kv * head_dim_v; }
  std::string describe() const;  // one line for logs
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;
  bool required = true;
};

// Every tensor the forward pass reads, with its expected shape. For deepseek2 the attention
// form (q_lora or not, split kv_b or not) is taken from which tensors the file has.
std::vector<TensorSpec> expected_tensors(const ModelConfig& config, const GgufFile& file);

// Throws Error(invalid_file) for the first missing required tensor ("missing tensor 'x'") or
// wrong shape ("tensor 'x' has shape [..], expected [..]"), and Error(unsupported) for a type
// the kernels cannot compute on.
void check_tensors(const ModelConfig& config, const GgufFile& file);

std::string format_shape(const std::vector<int64_t>& ne);

}  // namespace sluice::core
