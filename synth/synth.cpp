#include "synth/synth.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "common/error.h"
#include "core/gguf/gguf_split_writer.h"
#include "synth/synth_vocab.h"

namespace sluice::core::synth {
namespace {

constexpr uint32_t kGatingSoftmax = 1, kGatingSigmoid = 2;  // llama.cpp expert_gating_func

enum class InitKind { random, uniform, router, bias };

struct TensorInit {
  InitKind kind = InitKind::random;
  double std = 0;
  double lo = 0.8, hi = 1.2;  // uniform
  double ctx_std = 0;       // attn_output rows inside the block's context subspace
  uint32_t ctx_dim0 = 0, ctx_dims = 0;
  uint32_t block = 0;
  uint64_t seed = 0;
};

struct Declarer {
  const SynthPlan& plan;
  uint64_t seed;
  GgufStreamWriter& w;
  std::vector<TensorInit> inits;
  int n_attn_v = 0;  // attn_v tensors declared so far (llama-quantize's i_attention_wv)
  int n_ffn_down = 0;  // ffn_down* tensors declared so far (its i_ffn_down)

  void add(const std::string& name, std::initializer_list<int64_t> ne, InitKind kind, double std, uint32_t block) {
    const Preset& p = plan.preset;
    QuantModelInfo qi;
    qi.n_layer = p.n_layer;
    qi.n_head = p.n_head;
    qi.n_head_kv = p.arch == Arch::kimi_k3 ? 0 : p.n_head_kv;  // llama.cpp's n_gqa() of block 0
    qi.n_expert = p.n_expert;
    qi.n_ffn_down = p.n_layer_dense_lead + p.n_moe_layers() * (p.n_expert_shared > 0 ? 2 : 1);
    if (p.arch == Arch::kimi_k3)
      for (uint32_t i = 0; i < p.n_layer; ++i) qi.n_attention_wv += p.is_mla_block(i) ? 0 : 1;
    const bool is_v = name.find("attn_v.weight") != std::string::npos;
    const bool is_down = name.find("ffn_down") != std::string::npos;
    GgmlType type = kind == InitKind::random
                        ? choose_tensor_type(*plan.file_type, qi, name, ne.begin(), static_cast<uint32_t>(ne.size()),
                                             p.arch == Arch::kimi_k3 && is_v ? n_attn_v : -1, is_down ? n_ffn_down : -1)
                        : GgmlType::F32;
    if (is_v) ++n_attn_v;
    if (is_down) ++n_ffn_down;
    w.add_tensor(name, type, ne);
    TensorInit ti;
    ti.kind = kind;
    ti.std = std;
    ti.block = block;
    ti.seed = mix_seed(seed, hash_name(name));
    inits.push_back(ti);
  }
  // A matrix [fan_in, fan_out(, n)] with the init its role asks for.
  void matrix(const std::string& name, std::initializer_list<int64_t> ne, bool residual, uint32_t block) {
    const double fan_in = static_cast<double>(*ne.begin());
    add(name, ne, InitKind::random, (residual ? 0.15 : 1.0) / std::sqrt(fan_in), block);
  }
  void norm(const std::string& name, int64_t n, uint32_t block) { add(name, {n}, InitKind::uniform, 0, block); }
  void uniform(const std::string& name, int64_t n, double lo, double hi, uint32_t block) {
    add(name, {n}, InitKind::uniform, 0, block);
    inits.back().lo = lo;
    inits.back().hi = hi;
  }
};

std::string blk(uint32_t i, const char* what) { return "blk." + std::to_string(i) + "." + what; }

void add_trailer_keys(const SynthPlan& plan, const SynthOptions& o, GgufStreamWriter& w);

// kimi-k3 keys, in the order llama.cpp's converter writes them.
void add_kimi_k3_keys(const SynthPlan& plan, GgufStreamWriter& w) {
  const Preset& p = plan.preset;
  const std::string a = p.arch_name + ".";
  w.add_u32(a + "vocab_size", plan.n_vocab);
  w.add_u32(a + "context_length", p.n_ctx_train);
  w.add_u32(a + "embedding_length", p.n_embd);
  w.add_u32(a + "block_count", p.n_layer);
  w.add_u32(a + "feed_forward_length", p.n_ff);
  w.add_u32(a + "attention.head_count", p.n_head);
  std::vector<int32_t> kv(p.n_layer);
  for (uint32_t i = 0; i < p.n_layer; ++i) kv[i] = p.is_mla_block(i) ? 1 : 0;
  w.add_i32_array(a + "attention.head_count_kv", kv);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  w.add_u32(a + "expert_count", p.n_expert);
  w.add_u32(a + "expert_used_count", p.n_expert_used);
  w.add_u32(a + "expert_group_count", p.n_group);
  w.add_u32(a + "expert_group_used_count", p.n_group_used);
  w.add_u32(a + "expert_gating_func", kGatingSigmoid);
  w.add_u32(a + "ssm.conv_kernel", p.ssm_conv_kernel);
  w.add_u32(a + "kda.head_dim", p.kda_head_dim);
  w.add_f32(a + "kda.gate_lower_bound", p.kda_gate_lower_bound);
  w.add_u32(a + "attention.q_lora_rank", p.q_lora_rank);
  w.add_u32(a + "attention.kv_lora_rank", p.kv_lora_rank);
  w.add_u32(a + "rope.dimension_count", p.rope_dim);
  w.add_u32(a + "attention.key_length", p.kv_lora_rank + p.qk_rope_head_dim);
  w.add_u32(a + "attention.value_length", p.kv_lora_rank);
  w.add_u32(a + "attention.key_length_mla", p.qk_nope_head_dim + p.qk_rope_head_dim);
  w.add_u32(a + "attention.value_length_mla", p.v_head_dim);
  w.add_u32(a + "expert_feed_forward_length", p.n_ff_exp);
  w.add_u32(a + "expert_shared_count", p.n_expert_shared);
  w.add_u32(a + "leading_dense_block_count", p.n_layer_dense_lead);
  w.add_f32(a + "expert_weights_scale", p.expert_weights_scale);
  w.add_bool(a + "expert_weights_norm", p.expert_weights_norm);
  w.add_u32(a + "expert_latent_length", p.n_latent);
  w.add_f32(a + "activation.situ_beta", p.situ_beta);
  w.add_f32(a + "activation.situ_linear_beta", p.situ_linear_beta);
  w.add_u32(a + "attn_res.block_size", p.attn_res_block_size);
}

void add_keys(const SynthPlan& plan, const SynthOptions& o, GgufStreamWriter& w) {
  const Preset& p = plan.preset;
  const std::string a = p.arch_name + ".";
  w.add_string("general.architecture", p.arch_name);
  w.add_string("general.name", "synth-" + p.name + "-" + std::to_string(p.n_layer) + "L");
  if (o.vocab_path.empty()) add_builtin_vocab(w, p, plan.n_vocab);
  else copy_vocab(w, p, o.vocab_path);
  if (p.arch == Arch::kimi_k3) {
    add_kimi_k3_keys(plan, w);
    add_trailer_keys(plan, o, w);
    return;
  }
  w.add_u32(a + "context_length", p.n_ctx_train);
  w.add_u32(a + "embedding_length", p.n_embd);
  w.add_u32(a + "block_count", p.n_layer);
  w.add_u32(a + "feed_forward_length", p.n_ff);
  w.add_u32(a + "attention.head_count", p.n_head);
  w.add_u32(a + "attention.head_count_kv", p.n_head_kv);
  if (p.arch == Arch::qwen3moe) {
    w.add_u32(a + "attention.key_length", p.head_dim);
    w.add_u32(a + "attention.value_length", p.head_dim);
  }
  if (p.arch == Arch::llama) w.add_u32(a + "rope.dimension_count", p.rope_dim);
  w.add_f32(a + "rope.freq_base", p.rope_freq_base);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  w.add_u32(a + "expert_count", p.n_expert);
  w.add_u32(a + "expert_used_count", p.n_expert_used);
  if (p.arch == Arch::deepseek2) {
    w.add_u32(a + "expert_group_count", p.n_group);
    w.add_u32(a + "expert_group_used_count", p.n_group_used);
    w.add_u32(a + "expert_gating_func", p.gating == Gating::sigmoid ? kGatingSigmoid : kGatingSoftmax);
    w.add_u32(a + "leading_dense_block_count", p.n_layer_dense_lead);
  }
  if (p.arch == Arch::qwen3moe) w.add_u32(a + "expert_feed_forward_length", p.n_ff_exp);
  w.add_u32(a + "vocab_size", plan.n_vocab);
  if (p.arch == Arch::deepseek2) {
    w.add_u32(a + "attention.q_lora_rank", p.q_lora_rank);
    w.add_u32(a + "attention.kv_lora_rank", p.kv_lora_rank);
    w.add_u32(a + "attention.key_length", p.kv_lora_rank + p.qk_rope_head_dim);
    w.add_u32(a + "attention.value_length", p.kv_lora_rank);
    w.add_u32(a + "attention.key_length_mla", p.qk_nope_head_dim + p.qk_rope_head_dim);
    w.add_u32(a + "attention.value_length_mla", p.v_head_dim);
    w.add_u32(a + "expert_feed_forward_length", p.n_ff_exp);
    w.add_u32(a + "expert_shared_count", p.n_expert_shared);
    w.add_f32(a + "expert_weights_scale", p.expert_weights_scale);
    w.add_bool(a + "expert_weights_norm", p.expert_weights_norm);
    w.add_u32(a + "rope.dimension_count", p.rope_dim);
    w.add_string(a + "rope.scaling.type", "yarn");
    w.add_f32(a + "rope.scaling.factor", p.yarn_factor);
    w.add_u32(a + "rope.scaling.original_context_length", p.yarn_orig_ctx);
    w.add_f32(a + "rope.scaling.yarn_log_multiplier", p.yarn_log_multiplier);
  }
  add_trailer_keys(plan, o, w);
}

void add_trailer_keys(const SynthPlan& plan, const SynthOptions& o, GgufStreamWriter& w) {
  const Preset& p = plan.preset;
  w.add_u32("general.quantization_version", 2);
  w.add_u32("general.file_type", plan.file_type->llama_ftype);
  w.add_string("sluice.synth.preset", p.name);
  w.add_u64("sluice.synth.seed", o.seed);
  w.add_f32("sluice.synth.skew", static_cast<float>(o.skew));
  w.add_f32("sluice.synth.router_ctx_share", static_cast<float>(plan.ctx_share));
  w.add_f32("sluice.synth.router_ctx_std", static_cast<float>(plan.process.ctx_std));
  w.add_u32("sluice.synth.router_ctx_dims", 32);
}

std::vector<TensorInit> declare(const SynthPlan& plan, const SynthOptions& o, GgufStreamWriter& w) {
  add_keys(plan, o, w);
  const Preset& p = plan.preset;
  Declarer d{plan, o.seed, w, {}};
  const int64_t E = p.n_embd, V = plan.n_vocab;
  d.add("token_embd.weight", {E, V}, InitKind::random, 1.0, 0);
  const bool k3 = p.arch == Arch::kimi_k3;
  const double qs = kQueryScale;
  for (uint32_t i = 0; i < p.n_layer; ++i) {
    d.norm(blk(i, "attn_norm.weight"), E, i);
    if (k3) d.add(blk(i, "attn_res_score.weight"), {E}, InitKind::random, 1.5 / std::sqrt(double(E)), i);
    int64_t attn_out_in = 0;
    const int64_t H = p.n_head;
    if (k3 && !p.is_mla_block(i)) {  // KDA linear attention
      const int64_t dh = p.kda_head_dim, D = H * dh;
      for (const char* c : {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"})
        d.add(blk(i, c), {p.ssm_conv_kernel, 1, D}, InitKind::random, 0.5, i);
      d.matrix(blk(i, "attn_q.weight"), {E, D}, false, i);
      d.matrix(blk(i, "attn_k.weight"), {E, D}, false, i);
      d.matrix(blk(i, "attn_v.weight"), {E, D}, false, i);
      d.matrix(blk(i, "ssm_f_a.weight"), {E, dh}, false, i);
      d.matrix(blk(i, "ssm_f_b.weight"), {dh, D}, false, i);
      d.matrix(blk(i, "ssm_beta.weight"), {E, H}, false, i);
      d.uniform(blk(i, "ssm_a"), H, -2.0, -0.5, i);
      d.uniform(blk(i, "ssm_dt.bias"), D, -4.0, 1.0, i);
      d.matrix(blk(i, "ssm_g.weight"), {E, D}, false, i);
      d.norm(blk(i, "ssm_norm.weight"), dh, i);
      attn_out_in = D;
    } else if (p.arch == Arch::deepseek2 || k3) {  // MLA
      const int64_t qk = p.qk_nope_head_dim + p.qk_rope_head_dim;
      d.matrix(blk(i, "attn_q_a.weight"), {E, p.q_lora_rank}, false, i);
      d.uniform(blk(i, "attn_q_a_norm.weight"), p.q_lora_rank, 0.8 * qs, 1.2 * qs, i);
      d.matrix(blk(i, "attn_q_b.weight"), {p.q_lora_rank, H * qk}, false, i);
      d.matrix(blk(i, "attn_kv_a_mqa.weight"), {E, p.kv_lora_rank + p.qk_rope_head_dim}, false, i);
      d.norm(blk(i, "attn_kv_a_norm.weight"), p.kv_lora_rank, i);
      d.matrix(blk(i, "attn_k_b.weight"), {p.qk_nope_head_dim, p.kv_lora_rank, H}, false, i);
      d.matrix(blk(i, "attn_v_b.weight"), {p.kv_lora_rank, p.v_head_dim, H}, false, i);
      if (k3) d.matrix(blk(i, "attn_gate.weight"), {E, H * p.v_head_dim}, false, i);
      attn_out_in = H * p.v_head_dim;
    } else {
      const int64_t hd = p.head_dim;
      d.matrix(blk(i, "attn_q.weight"), {E, H * hd}, false, i);
      if (p.arch == Arch::llama) d.inits.back().std *= qs;
      d.matrix(blk(i, "attn_k.weight"), {E, p.n_head_kv * hd}, false, i);
      d.matrix(blk(i, "attn_v.weight"), {E, p.n_head_kv * hd}, false, i);
      if (p.arch == Arch::qwen3moe) {
        d.uniform(blk(i, "attn_q_norm.weight"), hd, 0.8 * qs, 1.2 * qs, i);
        d.norm(blk(i, "attn_k_norm.weight"), hd, i);
      }
      attn_out_in = H * hd;
    }
    d.matrix(blk(i, "attn_output.weight"), {attn_out_in, E}, true, i);
    if (i >= p.n_layer_dense_lead) {  // context rows feed this block's router
      const RouterDesign rd = block_router_design(plan, 0, i);
      TensorInit& ti = d.inits.back();
      ti.ctx_std = kCtxRowStd * plan.process.ctx_std / std::sqrt(static_cast<double>(attn_out_in));
      ti.ctx_dim0 = rd.ctx_dim0;
      ti.ctx_dims = rd.ctx_dims;
    }
    d.norm(blk(i, "ffn_norm.weight"), E, i);
    if (k3) d.add(blk(i, "ffn_res_score.weight"), {E}, InitKind::random, 1.5 / std::sqrt(double(E)), i);
    if (i < p.n_layer_dense_lead) {
      d.matrix(blk(i, "ffn_gate.weight"), {E, p.n_ff}, false, i);
      d.matrix(blk(i, "ffn_up.weight"), {E, p.n_ff}, false, i);
      d.matrix(blk(i, "ffn_down.weight"), {p.n_ff, E}, true, i);
      continue;
    }
    const int64_t X = p.n_expert, F = p.n_ff_exp;
    const int64_t L = k3 ? p.n_latent : E;  // the experts' input/output width
    d.add(blk(i, "ffn_gate_inp.weight"), {E, X}, InitKind::router, 0, i);
    if (p.gating == Gating::sigmoid) d.add(blk(i, "exp_probs_b.bias"), {X}, InitKind::bias, 0, i);
    if (k3) {
      d.matrix(blk(i, "ffn_routed_down.weight"), {E, L}, false, i);
      d.norm(blk(i, "ffn_routed_norm.weight"), L, i);
    }
    d.matrix(blk(i, "ffn_gate_exps.weight"), {L, F, X}, false, i);
    d.matrix(blk(i, "ffn_up_exps.weight"), {L, F, X}, false, i);
    d.matrix(blk(i, "ffn_down_exps.weight"), {F, L, X}, !k3, i);
    if (k3) d.matrix(blk(i, "ffn_routed_up.weight"), {L, E}, true, i);
    if (p.n_expert_shared > 0) {
      const int64_t S = F * p.n_expert_shared;
      d.matrix(blk(i, "ffn_gate_shexp.weight"), {E, S}, false, i);
      d.matrix(blk(i, "ffn_up_shexp.weight"), {E, S}, false, i);
      d.matrix(blk(i, "ffn_down_shexp.weight"), {S, E}, true, i);
    }
  }
  d.norm("output_norm.weight", E, p.n_layer);
  if (k3) d.add("output_res_score.weight", {E}, InitKind::random, 1.5 / std::sqrt(double(E)), p.n_layer);
  d.add("output.weight", {E, V}, InitKind::random, 8.0 / std::sqrt(static_cast<double>(E)), p.n_layer);
  return d.inits;
}

}  // namespace

RouterDesign block_router_design(const SynthPlan& plan, double skew, uint32_t block) {
  RouterDesign d = router_design(plan.preset, block, skew);
  d.ctx_share = plan.ctx_share;
  d.ctx_std = plan.process.ctx_std;
  return d;
}

RouterWeights block_router(const SynthPlan& plan, const SynthOptions& o, uint32_t block) {
  return make_router(block_router_design(plan, o.skew, block), mix_seed(o.seed, 0x2007E2ull + block));
}

SynthPlan plan_synth(const SynthOptions& o) {
  SynthPlan plan;
  const Preset& base = find_preset(o.preset);
  plan.file_type = &parse_file_type(o.quant);
  if (!std::isfinite(o.skew) || o.skew < 0 || o.skew > 20)
    throw Error(ErrorCode::invalid_argument, "--skew " + std::to_string(o.skew) + ": must be in [0, 20]");
  if (o.out.empty()) throw Error(ErrorCode::invalid_argument, "-o/--output: an output path is required");
  plan.preset = reduce(base, o.layers, o.experts, o.expert_ff);
  plan.n_vocab = plan.preset.n_vocab;
  if (!o.vocab_path.empty()) {
    GgufStreamWriter probe;
    plan.n_vocab = copy_vocab(probe, plan.preset, o.vocab_path);
  }
  plan.process = HiddenProcess{};
  plan.process.seed = o.seed;
  if (plan.preset.n_moe_layers() > 0) {
    RouterDesign d = router_design(plan.preset, 0, o.skew);
    d.ctx_std = plan.process.ctx_std;
    plan.ctx_share = calibrate_ctx_share(d, plan.process);
  }
  return plan;
}

void declare_model(const SynthPlan& plan, const SynthOptions& o, GgufStreamWriter& w) { declare(plan, o, w); }

SynthResult synthesize(const SynthOptions& o, const GgufStreamWriter::Progress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  SynthResult res;
  res.plan = plan_synth(o);
  const SynthPlan& plan = res.plan;
  GgufStreamWriter w;
  const std::vector<TensorInit> inits = declare(plan, o, w);

  std::map<uint32_t, std::shared_ptr<RouterWeights>> routers;
  auto router_for = [&](uint32_t block) -> const RouterWeights& {
    auto it = routers.find(block);
    if (it == routers.end()) {
      routers.clear();  // one MoE block at a time
      auto r = std::make_shared<RouterWeights>(block_router(plan, o, block));
      it = routers.emplace(block, std::move(r)).first;
    }
    return *it->second;
  };

  auto fill = [&](const StreamTensor& t, uint64_t offset, std::span<std::byte> dst) {
    const TensorInit& ti = inits[t.index];
    if (offset % t.row_bytes != 0 || dst.size() % t.row_bytes != 0)
      throw Error(ErrorCode::internal, "synth: tensor '" + t.name + "' piece is not whole rows");
    const uint64_t row0 = offset / t.row_bytes, n_rows = dst.size() / t.row_bytes;
    switch (ti.kind) {
      case InitKind::random:
        for (uint64_t r = 0; r < n_rows; ++r) {
          const uint64_t row = row0 + r;
          Rng rng(mix_seed(ti.seed, row));
          double std = ti.std;
          if (ti.ctx_dims) {
            const uint64_t out_dim = row % static_cast<uint64_t>(t.ne[1]);
            if (out_dim >= ti.ctx_dim0 && out_dim < ti.ctx_dim0 + ti.ctx_dims) std = ti.ctx_std;
          }
          fill_random(t.type, rng, static_cast<float>(std), dst.subspan(r * t.row_bytes, t.row_bytes));
        }
        break;
      case InitKind::uniform:
        for (uint64_t r = 0; r < n_rows; ++r) {
          Rng rng(mix_seed(ti.seed, row0 + r));
          float* f = reinterpret_cast<float*>(dst.data() + r * t.row_bytes);
          for (int64_t i = 0; i < t.ne[0]; ++i) f[i] = static_cast<float>(ti.lo + (ti.hi - ti.lo) * rng.uniform());
        }
        break;
      case InitKind::router: {
        const RouterWeights& rw = router_for(ti.block);
        std::memcpy(dst.data(), reinterpret_cast<const std::byte*>(rw.w.data()) + offset, dst.size());
        break;
      }
      case InitKind::bias: {
        const RouterWeights& rw = router_for(ti.block);
        std::memcpy(dst.data(), reinterpret_cast<const std::byte*>(rw.bias.data()) + offset, dst.size());
        break;
      }
    }
  };
  if (o.split_max_bytes > 0) {
    res.paths = write_split(w, split_prefix(o.out), o.split_max_bytes, fill, progress);
    for (const std::string& path : res.paths) res.bytes += std::filesystem::file_size(path);
  } else {
    w.write(o.out, fill, progress);
    res.paths = {o.out};
    res.bytes = w.file_bytes();
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace sluice::core::synth
