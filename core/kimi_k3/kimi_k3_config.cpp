#include "core/kimi_k3/kimi_k3_config.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "common/error.h"
#include "kernels/quant.h"

namespace sluice::core {

namespace {

constexpr const char* kPrefix = "kimi-k3.";
constexpr int64_t kMaxDim = int64_t{1} << 32;

class Keys {
 public:
  explicit Keys(const GgufFile& f) : f_(f) {}
  std::string k(const char* name) const { return std::string(kPrefix) + name; }
  int64_t req(const char* name) const { return check(name, f_.get_uint(k(name)), false); }
  int64_t opt(const char* name, int64_t fallback) const {
    return check(name, f_.get_uint_or(k(name), static_cast<uint64_t>(fallback)), true);
  }
  float reqf(const char* name) const { return static_cast<float>(f_.get_float(k(name))); }
  float optf(const char* name, double fallback) const { return static_cast<float>(f_.get_float_or(k(name), fallback)); }
  bool optb(const char* name, bool fallback) const { return f_.get_bool_or(k(name), fallback); }
  bool has(const char* name) const { return f_.has(k(name)); }
  // A key stored either as a scalar or as a per-layer array.
  std::vector<int64_t> per_layer(const char* name, int64_t n_layer, int64_t fallback) const {
    const GgufValue* v = f_.find(k(name));
    if (!v) return std::vector<int64_t>(static_cast<size_t>(n_layer), fallback);
    if (v->type != GgufValueType::array)
      return std::vector<int64_t>(static_cast<size_t>(n_layer), static_cast<int64_t>(f_.get_uint(k(name))));
    std::vector<int64_t> a = f_.get_int_array(k(name));
    if (static_cast<int64_t>(a.size()) != n_layer)
      throw Error(ErrorCode::invalid_file, "key '" + k(name) + "' has " + std::to_string(a.size()) +
                                               " entries, expected block_count = " + std::to_string(n_layer) +
                                               " in '" + f_.path() + "'");
    for (int64_t x : a) check(name, static_cast<uint64_t>(x), true);
    return a;
  }

 private:
  int64_t check(const char* name, uint64_t v, bool zero_ok) const {
    if ((!zero_ok && v == 0) || v > static_cast<uint64_t>(kMaxDim))
      throw Error(ErrorCode::invalid_file, "key '" + k(name) + "' = " + std::to_string(v) +
                                               " is out of range in '" + f_.path() + "'");
    return static_cast<int64_t>(v);
  }
  const GgufFile& f_;
};

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorCode::invalid_file, message);
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

KimiK3Config KimiK3Config::from_gguf(const GgufFile& f) {
  const std::string arch = f.architecture();
  if (arch != "kimi-k3")
    throw Error(ErrorCode::invalid_argument, "'" + f.path() + "' is architecture '" + arch + "', not 'kimi-k3'");
  const Keys keys(f);
  KimiK3Config c;
  c.n_ctx_train = keys.req("context_length");
  c.n_embd = keys.req("embedding_length");
  c.n_layer = keys.req("block_count");
  f.check_block_count(static_cast<uint64_t>(c.n_layer));
  c.n_head = keys.opt("attention.head_count", 0);
  require(c.n_head > 0, "key 'kimi-k3.attention.head_count' is missing or 0 in '" + f.path() + "'");
  c.n_head_kv = keys.per_layer("attention.head_count_kv", c.n_layer, c.n_head);
  c.rms_eps = keys.reqf("attention.layer_norm_rms_epsilon");
  require(c.rms_eps > 0 && std::isfinite(c.rms_eps), "key 'kimi-k3.attention.layer_norm_rms_epsilon' must be > 0");

  c.d_conv = keys.req("ssm.conv_kernel");
  c.kda_head_dim = keys.req("kda.head_dim");
  c.gate_lower_bound = keys.has("kda.gate_lower_bound") ? keys.reqf("kda.gate_lower_bound")
                                                         : -std::numeric_limits<float>::infinity();

  c.q_lora_rank = keys.opt("attention.q_lora_rank", 0);
  c.kv_lora_rank = keys.req("attention.kv_lora_rank");
  const int64_t k_mla = keys.req("attention.key_length_mla");
  c.v_head_dim = keys.req("attention.value_length_mla");
  c.qk_rope = keys.opt("rope.dimension_count", 0);
  require(c.qk_rope < k_mla, "key 'kimi-k3.rope.dimension_count' = " + std::to_string(c.qk_rope) +
                                 " must be below key_length_mla = " + std::to_string(k_mla));
  c.qk_nope = k_mla - c.qk_rope;
  c.kq_scale = 1.0f / std::sqrt(static_cast<float>(k_mla));
  if (keys.has("attention.key_length")) {
    const int64_t kl = keys.req("attention.key_length");
    require(kl == c.kv_lora_rank + c.qk_rope, "key 'kimi-k3.attention.key_length' = " + std::to_string(kl) +
                                                  ", expected kv_lora_rank + qk_rope = " +
                                                  std::to_string(c.kv_lora_rank + c.qk_rope));
  }

  c.n_ff = keys.opt("feed_forward_length", 0);
  c.n_layer_dense_lead = keys.opt("leading_dense_block_count", 0);
  require(c.n_layer_dense_lead <= c.n_layer, "key 'kimi-k3.leading_dense_block_count' exceeds block_count");
  c.n_expert = keys.opt("expert_count", 0);
  c.n_expert_used = keys.per_layer("expert_used_count", c.n_layer, 0)[0];
  c.n_ff_exp = keys.per_layer("expert_feed_forward_length", c.n_layer, 0)[0];
  require(keys.has("expert_feed_forward_length"), "missing key 'kimi-k3.expert_feed_forward_length' in '" + f.path() + "'");
  c.n_expert_shared = keys.req("expert_shared_count");
  c.n_ff_shexp = c.n_ff_exp * std::max<int64_t>(c.n_expert_shared, 1);
  c.n_latent = keys.opt("expert_latent_length", 0);
  c.n_expert_groups = keys.opt("expert_group_count", 0);
  c.n_group_used = keys.opt("expert_group_used_count", 0);
  c.expert_weights_norm = keys.optb("expert_weights_norm", false);
  c.expert_weights_scale = keys.optf("expert_weights_scale", 0.0);
  const int64_t gating = keys.req("expert_gating_func");
  if (gating != 2)
    throw Error(ErrorCode::unsupported, "key 'kimi-k3.expert_gating_func' = " + std::to_string(gating) +
                                            " is not supported (kimi-k3 uses 2, sigmoid)");
  if (c.n_layer_dense_lead < c.n_layer) {
    require(c.n_expert > 0 && c.n_expert_used > 0 && c.n_expert_used <= c.n_expert,
            "kimi-k3 expert_used_count = " + std::to_string(c.n_expert_used) + " must be in [1, expert_count = " +
                std::to_string(c.n_expert) + "]");
    if (c.n_expert_groups > 1)
      require(c.n_expert % c.n_expert_groups == 0 && c.n_group_used >= 1 && c.n_group_used <= c.n_expert_groups,
              "kimi-k3 expert groups: expert_count " + std::to_string(c.n_expert) + " / expert_group_count " +
                  std::to_string(c.n_expert_groups) + " / expert_group_used_count " +
                  std::to_string(c.n_group_used) + " are inconsistent");
  }
  c.situ_beta = keys.reqf("activation.situ_beta");
  c.situ_lin_beta = keys.reqf("activation.situ_linear_beta");
  require(c.situ_beta != 0.0f, "key 'kimi-k3.activation.situ_beta' must not be 0");
  c.res_block_size = static_cast<int64_t>(f.get_uint(keys.k("attn_res.block_size")));
  require(c.res_block_size <= c.n_layer || c.res_block_size < kMaxDim, "key 'kimi-k3.attn_res.block_size' is out of range");

  c.n_vocab = 0;
  if (const GgufTensorInfo* out = f.find_tensor("output.weight")) c.n_vocab = out->ne[1];
  require(c.n_vocab > 0, "missing tensor 'output.weight' in '" + f.path() + "'");
  return c;
}

int64_t KimiK3Config::n_kda_layers() const {
  int64_t n = 0;
  for (int64_t il = 0; il < n_layer; ++il) n += is_kda(il);
  return n;
}

int64_t KimiK3Config::n_mla_layers() const { return n_layer - n_kda_layers(); }

int64_t KimiK3Config::n_checkpoints() const {
  return res_block_size > 0 ? (n_layer + res_block_size - 1) / res_block_size : 0;
}

std::string KimiK3Config::describe() const {
  std::ostringstream s;
  s << "kimi-k3: " << n_layer << " layers (" << n_kda_layers() << " KDA, " << n_mla_layers() << " MLA), n_embd "
    << n_embd << ", heads " << n_head << ", d_h " << kda_head_dim << ", kv_lora " << kv_lora_rank << ", experts "
    << n_expert << " (" << n_expert_used << " used, " << n_expert_shared << " shared, latent " << n_latent
    << "), residual block " << res_block_size;
  return s.str();
}

std::vector<KimiK3TensorSpec> kimi_k3_tensors(const KimiK3Config& c, const GgufFile& f) {
  std::vector<KimiK3TensorSpec> t;
  const int64_t E = c.n_embd, DI = c.d_inner(), H = c.n_head;
  const bool mix = c.res_block_size > 0;
  t.push_back({"token_embd.weight", {E, c.n_vocab}});
  t.push_back({"output_norm.weight", {E}});
  t.push_back({"output.weight", {E, c.n_vocab}});
  if (mix) t.push_back({"output_res_score.weight", {E}});
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    auto add = [&](const char* n, std::vector<int64_t> ne, bool req = true) { t.push_back({b + n, std::move(ne), req}); };
    add("attn_norm.weight", {E});
    add("ffn_norm.weight", {E});
    if (mix) {
      add("attn_res_score.weight", {E});
      add("ffn_res_score.weight", {E});
    }
    if (c.is_kda(il)) {
      for (const char* x : {"q", "k", "v"}) {
        add((std::string("ssm_conv1d_") + x + ".weight").c_str(), {c.d_conv, 1, DI});
        add((std::string("attn_") + x + ".weight").c_str(), {E, DI});
      }
      add("ssm_f_a.weight", {E, c.kda_head_dim});
      add("ssm_f_b.weight", {c.kda_head_dim, DI});
      add("ssm_beta.weight", {E, H});
      add("ssm_a", {H});
      add("ssm_dt.bias", {DI});
      add("ssm_g.weight", {E, DI});
      add("ssm_norm.weight", {c.kda_head_dim});
      add("attn_output.weight", {DI, E});
    } else {
      const int64_t dqk = c.qk_nope + c.qk_rope;
      if (f.find_tensor(b + "attn_q_a_norm.weight")) {
        require(c.q_lora_rank > 0, "tensor '" + b + "attn_q_a_norm.weight' present but attention.q_lora_rank is 0");
        add("attn_q_a.weight", {E, c.q_lora_rank});
        add("attn_q_a_norm.weight", {c.q_lora_rank});
        add("attn_q_b.weight", {c.q_lora_rank, H * dqk});
      } else {
        add("attn_q.weight", {E, H * dqk});
      }
      add("attn_kv_a_mqa.weight", {E, c.kv_lora_rank + c.qk_rope});
      add("attn_kv_a_norm.weight", {c.kv_lora_rank});
      add("attn_k_b.weight", {c.qk_nope, c.kv_lora_rank, H});
      add("attn_v_b.weight", {c.kv_lora_rank, c.v_head_dim, H});
      add("attn_gate.weight", {E, H * c.v_head_dim}, false);
      add("attn_output.weight", {H * c.v_head_dim, E});
    }
    if (!c.is_moe_layer(il)) {
      add("ffn_gate.weight", {E, c.n_ff});
      add("ffn_up.weight", {E, c.n_ff});
      add("ffn_down.weight", {c.n_ff, E});
    } else {
      const int64_t L = c.expert_width();
      add("ffn_gate_inp.weight", {E, c.n_expert});
      add("exp_probs_b.bias", {c.n_expert}, false);
      add("ffn_gate_exps.weight", {L, c.n_ff_exp, c.n_expert});
      add("ffn_up_exps.weight", {L, c.n_ff_exp, c.n_expert});
      add("ffn_down_exps.weight", {c.n_ff_exp, L, c.n_expert});
      if (c.n_latent > 0) {
        add("ffn_routed_down.weight", {E, L});
        add("ffn_routed_up.weight", {L, E});
        add("ffn_routed_norm.weight", {L}, false);
      }
      add("ffn_gate_shexp.weight", {E, c.n_ff_shexp}, false);
      add("ffn_up_shexp.weight", {E, c.n_ff_shexp}, false);
      add("ffn_down_shexp.weight", {c.n_ff_shexp, E}, false);
    }
  }
  return t;
}

void check_kimi_k3_tensors(const KimiK3Config& c, const GgufFile& f) {
  for (const KimiK3TensorSpec& s : kimi_k3_tensors(c, f)) {
    const GgufTensorInfo* t = f.find_tensor(s.name);
    if (!t) {
      if (s.required) throw Error(ErrorCode::invalid_file, "missing tensor '" + s.name + "' in '" + f.path() + "'");
      continue;
    }
    // Compare with trailing 1s dropped (quantized files store the conv taps 3-D, F16 files 4-D).
    std::vector<int64_t> have(t->ne.begin(), t->ne.begin() + t->n_dims), want = s.ne;
    while (have.size() > 1 && have.back() == 1) have.pop_back();
    while (want.size() > 1 && want.back() == 1) want.pop_back();
    if (have != want)
      throw Error(ErrorCode::invalid_file, "tensor '" + s.name + "' has shape " + shape_str(have) + ", expected " +
                                               shape_str(want) + " in '" + f.path() + "'");
    kernels::require_supported(t->type, s.name);
  }
}

}  // namespace sluice::core
