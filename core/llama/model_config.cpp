#include "core/llama/model_config.h"

#include <cmath>
#include <sstream>

#include "common/error.h"
#include "kernels/quant.h"

namespace sluice::core {

namespace {

class Keys {
 public:
  Keys(const GgufFile& f, std::string prefix) : f_(f), p_(std::move(prefix) + ".") {}
  std::string k(const char* name) const { return p_ + name; }
  int64_t req(const char* name) const { return positive(name, f_.get_uint(k(name))); }
  int64_t opt(const char* name, int64_t fallback) const {
    if (!f_.has(k(name))) return fallback;
    return bounded(name, f_.get_uint_or(k(name), 0));
  }
  float optf(const char* name, double fallback) const {
    return static_cast<float>(f_.get_float_or(k(name), fallback));
  }
  bool has(const char* name) const { return f_.has(k(name)); }
  std::string opts(const char* name) const { return f_.get_string_or(k(name), ""); }
  bool optb(const char* name, bool fallback) const { return f_.get_bool_or(k(name), fallback); }

 private:
  // Sizes and counts beyond 2^30 describe no real model; bounding them keeps every product of
  // two (head count x head size, ...) far from int64 overflow.
  static constexpr uint64_t kMaxValue = 1ull << 30;
  int64_t positive(const char* name, uint64_t v) const {
    if (v == 0) throw out_of_range(name, v);
    return bounded(name, v);
  }
  int64_t bounded(const char* name, uint64_t v) const {
    if (v > kMaxValue) throw out_of_range(name, v);
    return static_cast<int64_t>(v);
  }
  Error out_of_range(const char* name, uint64_t v) const {
    return Error(ErrorCode::invalid_file,
                 "key '" + p_ + name + "' = " + std::to_string(v) + " is out of range in '" + f_.path() + "'");
  }
  const GgufFile& f_;
  std::string p_;
};

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorCode::invalid_file, message);
}

void read_rope_scaling(const Keys& keys, ModelConfig& c) {
  const std::string type = keys.opts("rope.scaling.type");
  float factor = keys.optf("rope.scaling.factor", 0.0);
  if (factor == 0.0f) factor = keys.optf("rope.scale_linear", 0.0);
  c.rope.freq_scale = (type == "none" || factor == 0.0f) ? 1.0f : 1.0f / factor;
  c.rope.n_ctx_orig = static_cast<int>(keys.opt("rope.scaling.original_context_length", c.n_ctx_train));
  c.rope.ext_factor = type == "yarn" ? 1.0f : 0.0f;
  if (!type.empty() && type != "none" && type != "linear" && type != "yarn")
    throw Error(ErrorCode::unsupported, "rope scaling type '" + type + "' is not supported");
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.arch_name = f.architecture();
  if (c.arch_name == "llama") c.arch = Arch::llama;
  else if (c.arch_name == "qwen3moe") c.arch = Arch::qwen3moe;
  else if (c.arch_name == "deepseek2") c.arch = Arch::deepseek2;
  else
    throw Error(ErrorCode::unsupported, "architecture '" + c.arch_name + "' of '" + f.path() +
                                            "' is not supported (supported: llama, qwen3moe, deepseek2)");
  const Keys keys(f, c.arch_name);

  c.n_embd = keys.req("embedding_length");
  c.n_layer = keys.req("block_count");
  c.n_ctx_train = keys.req("context_length");
  c.n_head = keys.req("attention.head_count");
  c.n_head_kv = keys.opt("attention.head_count_kv", c.n_head);
  // Without explicit key/value lengths a head is n_embd / n_head wide, which must divide.
  require(keys.has("attention.key_length") || c.n_embd % c.n_head == 0,
          "embedding_length " + std::to_string(c.n_embd) + " is not a multiple of attention.head_count " +
              std::to_string(c.n_head) + " in '" + f.path() + "'");
  c.head_dim_k = keys.opt("attention.key_length", c.n_embd / c.n_head);
  c.head_dim_v = keys.opt("attention.value_length", c.n_embd / c.n_head);
  c.rms_eps = keys.optf("attention.layer_norm_rms_epsilon", 1e-5);
  c.n_ff = keys.opt("feed_forward_length", 0);
  c.n_expert = keys.opt("expert_count", 0);
  c.n_expert_used = keys.opt("expert_used_count", 0);
  if (const GgufTensorInfo* embd = f.find_tensor("token_embd.weight")) c.n_vocab = embd->ne[1];
  c.n_vocab = keys.opt("vocab_size", c.n_vocab);
  require(c.n_vocab > 0, "cannot tell the vocabulary size of '" + f.path() + "'");
  require(c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0,
          "attention.head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
              std::to_string(c.n_head_kv));

  c.rope.n_dims = static_cast<int>(keys.opt("rope.dimension_count", c.head_dim_k));
  c.rope.freq_base = keys.optf("rope.freq_base", 10000.0);
  read_rope_scaling(keys, c);

  if (c.n_expert > 0) {
    require(c.n_expert_used > 0 && c.n_expert_used <= c.n_expert,
            "expert_used_count " + std::to_string(c.n_expert_used) + " is not in [1, expert_count " +
                std::to_string(c.n_expert) + "]");
    c.n_ff_exp = keys.opt("expert_feed_forward_length", c.n_ff);
  }

  switch (c.arch) {
    case Arch::llama:
      c.rope.mode = kernels::RopeMode::norm;
      c.kq_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
      c.expert_weights_norm = true;
      break;
    case Arch::qwen3moe:
      c.rope.mode = kernels::RopeMode::neox;
      c.kq_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
      c.expert_weights_norm = true;
      require(c.n_expert > 0, "qwen3moe file '" + f.path() + "' has no expert_count");
      break;
    case Arch::deepseek2: {
      c.rope.mode = kernels::RopeMode::norm;
      c.n_layer_dense_lead = keys.opt("leading_dense_block_count", 0);
      require(c.n_layer_dense_lead <= c.n_layer,
              "deepseek2.leading_dense_block_count " + std::to_string(c.n_layer_dense_lead) +
                  " is past block_count " + std::to_string(c.n_layer) + " in '" + f.path() + "'");
      c.q_lora_rank = keys.opt("attention.q_lora_rank", 0);
      c.kv_lora_rank = keys.req("attention.kv_lora_rank");
      c.qk_rope = c.rope.n_dims;
      const int64_t k_mla = keys.opt("attention.key_length_mla", 0);
      const int64_t v_mla = keys.opt("attention.value_length_mla", 0);
      c.qk_nope = (k_mla ? k_mla : c.head_dim_k) - c.qk_rope;
      c.v_head_dim = v_mla ? v_mla : c.head_dim_v;
      require(c.qk_nope > 0, "deepseek2 key length leaves no room for qk_rope " + std::to_string(c.qk_rope));
      c.n_expert_shared = keys.opt("expert_shared_count", 0);
      c.n_ff_shexp = c.n_ff_exp * c.n_expert_shared;
      c.expert_weights_scale_on = true;
      c.expert_weights_scale = keys.optf("expert_weights_scale", 0.0);
      c.expert_weights_norm = keys.optb("expert_weights_norm", false);
      c.gating = static_cast<GatingFunc>(keys.opt("expert_gating_func", 1));
      if (c.gating != GatingFunc::softmax && c.gating != GatingFunc::sigmoid)
        throw Error(ErrorCode::unsupported,
                    "deepseek2.expert_gating_func = " + std::to_string(static_cast<uint32_t>(c.gating)) +
                        " is not supported (1 softmax, 2 sigmoid)");
      c.n_expert_groups = keys.opt("expert_group_count", 1);
      c.n_group_used = keys.opt("expert_group_used_count", 1);
      if (c.n_expert_groups > 1) {
        require(c.n_expert % c.n_expert_groups == 0 && c.n_expert / c.n_expert_groups >= 2 &&
                    c.n_group_used >= 1 && c.n_group_used <= c.n_expert_groups,
                "expert_group_count " + std::to_string(c.n_expert_groups) + " / expert_group_used_count " +
                    std::to_string(c.n_group_used) + " do not fit expert_count " + std::to_string(c.n_expert));
      }
      // llama.cpp pre-scales for YaRN: see ggml discussion 7416.
      const float log_mul = keys.optf("rope.scaling.yarn_log_multiplier", 0.0);
      const float mscale = 1.0f * (1.0f + log_mul * std::log(1.0f / c.rope.freq_scale));
      c.kq_scale = 1.0f * mscale * mscale / std::sqrt(static_cast<float>(c.qk_nope + c.qk_rope));
      c.rope.attn_factor = 1.0f / (1.0f + 0.1f * std::log(1.0f / c.rope.freq_scale));
      c.mla_split_kv_b = f.find_tensor("blk.0.attn_kv_b.weight") == nullptr;
      break;
    }
  }
  require(c.rope.n_dims > 0 && c.rope.n_dims % 2 == 0 &&
              c.rope.n_dims <= (c.is_mla() ? c.qk_rope : c.head_dim_k),
          "rope.dimension_count " + std::to_string(c.rope.n_dims) + " does not fit the head");
  return c;
}

std::string ModelConfig::describe() const {
  std::ostringstream s;
  s << arch_name << ": " << n_layer << " layers, n_embd " << n_embd << ", " << n_head << " heads";
  if (is_mla()) s << " (MLA kv_lora " << kv_lora_rank << ", q_lora " << q_lora_rank << ")";
  else s << " / " << n_head_kv << " kv, head " << head_dim_k;
  if (n_expert) s << ", " << n_expert << " experts (" << n_expert_used << " used, " << n_expert_shared << " shared)";
  s << ", vocab " << n_vocab;
  return s.str();
}

std::string format_shape(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c, const GgufFile& f) {
  std::vector<TensorSpec> v;
  const int64_t E = c.n_embd;
  v.push_back({"token_embd.weight", {E, c.n_vocab}});
  v.push_back({"output_norm.weight", {E}});
  v.push_back({"output.weight", {E, c.n_vocab}, false});  // absent: tied to token_embd
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    v.push_back({b + "attn_norm.weight", {E}});
    v.push_back({b + "ffn_norm.weight", {E}});
    if (c.is_mla()) {
      const int64_t qk = c.qk_nope + c.qk_rope;
      if (c.q_lora_rank > 0) {
        v.push_back({b + "attn_q_a.weight", {E, c.q_lora_rank}});
        v.push_back({b + "attn_q_a_norm.weight", {c.q_lora_rank}});
        v.push_back({b + "attn_q_b.weight", {c.q_lora_rank, c.n_head * qk}});
      } else {
        v.push_back({b + "attn_q.weight", {E, c.n_head * qk}});
      }
      v.push_back({b + "attn_kv_a_mqa.weight", {E, c.kv_lora_rank + c.qk_rope}});
      v.push_back({b + "attn_kv_a_norm.weight", {c.kv_lora_rank}});
      if (c.mla_split_kv_b) {
        v.push_back({b + "attn_k_b.weight", {c.qk_nope, c.kv_lora_rank, c.n_head}});
        v.push_back({b + "attn_v_b.weight", {c.kv_lora_rank, c.v_head_dim, c.n_head}});
      } else {
        v.push_back({b + "attn_kv_b.weight", {c.kv_lora_rank, c.n_head * (c.qk_nope + c.v_head_dim)}});
      }
      v.push_back({b + "attn_output.weight", {c.n_head * c.v_head_dim, E}});
    } else {
      v.push_back({b + "attn_q.weight", {E, c.n_head * c.head_dim_k}});
      v.push_back({b + "attn_k.weight", {E, c.n_head_kv * c.head_dim_k}});
      v.push_back({b + "attn_v.weight", {E, c.n_head_kv * c.head_dim_v}});
      v.push_back({b + "attn_output.weight", {c.n_head * c.head_dim_v, E}});
      if (c.arch == Arch::qwen3moe) {
        v.push_back({b + "attn_q_norm.weight", {c.head_dim_k}});
        v.push_back({b + "attn_k_norm.weight", {c.head_dim_k}});
      }
    }
    if (c.is_moe_layer(il)) {
      const int64_t F = c.n_ff_exp, X = c.n_expert;
      v.push_back({b + "ffn_gate_inp.weight", {E, X}});
      v.push_back({b + "ffn_gate_exps.weight", {E, F, X}});
      v.push_back({b + "ffn_up_exps.weight", {E, F, X}});
      v.push_back({b + "ffn_down_exps.weight", {F, E, X}});
      if (c.arch == Arch::deepseek2) {
        v.push_back({b + "exp_probs_b.bias", {X}, false});
        if (c.n_expert_shared > 0) {
          v.push_back({b + "ffn_gate_shexp.weight", {E, c.n_ff_shexp}});
          v.push_back({b + "ffn_up_shexp.weight", {E, c.n_ff_shexp}});
          v.push_back({b + "ffn_down_shexp.weight", {c.n_ff_shexp, E}});
        }
      }
    } else {
      v.push_back({b + "ffn_gate.weight", {E, c.n_ff}});
      v.push_back({b + "ffn_up.weight", {E, c.n_ff}});
      v.push_back({b + "ffn_down.weight", {c.n_ff, E}});
    }
  }
  (void)f;
  return v;
}

namespace {

// A tensor "blk.N.*" with N >= block_count would be silently ignored (or, for a reader that
// sizes per-block tables from the names, indexed out of range): reject it.
void check_block_indices(const ModelConfig& c, const GgufFile& f) {
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    size_t i = 4;
    uint64_t block = 0;
    while (i < t.name.size() && t.name[i] >= '0' && t.name[i] <= '9' && block < (1ull << 40)) {
      block = block * 10 + static_cast<uint64_t>(t.name[i++] - '0');
    }
    if (i == 4) continue;  // not a block tensor after all
    if (block >= static_cast<uint64_t>(c.n_layer))
      throw Error(ErrorCode::invalid_file, "tensor '" + t.name + "' names block " + std::to_string(block) +
                                               ", past block_count " + std::to_string(c.n_layer) + " in '" +
                                               f.path() + "'");
  }
}

}  // namespace

void check_tensors(const ModelConfig& c, const GgufFile& f) {
  f.check_block_count(static_cast<uint64_t>(c.n_layer));
  check_block_indices(c, f);
  if (c.is_mla() && c.q_lora_rank == 0 && f.find_tensor("blk.0.attn_q_a.weight"))
    throw Error(ErrorCode::invalid_file, "file '" + f.path() +
                                             "' has attn_q_a tensors but no deepseek2.attention.q_lora_rank");
  for (const TensorSpec& spec : expected_tensors(c, f)) {
    const GgufTensorInfo* t = f.find_tensor(spec.name);
    if (!t) {
      if (!spec.required) continue;
      throw Error(ErrorCode::invalid_file, "missing tensor '" + spec.name + "' in '" + f.path() + "'");
    }
    std::vector<int64_t> have(t->ne.begin(), t->ne.begin() + t->n_dims);
    std::vector<int64_t> want = spec.ne;
    // Trailing 1s do not change a shape.
    while (have.size() > 1 && have.back() == 1) have.pop_back();
    while (want.size() > 1 && want.back() == 1) want.pop_back();
    if (have != want)
      throw Error(ErrorCode::invalid_file, "tensor '" + spec.name + "' has shape " + format_shape(have) +
                                               ", expected " + format_shape(want));
    kernels::require_supported(t->type, spec.name);
  }
}

}  // namespace sluice::core
