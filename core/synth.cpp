#include "core/synth.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "common/error.h"
#include "core/synth_vocab.h"

namespace sluice::core::synth {
namespace {

constexpr uint32_t kGatingSoftmax = 1, kGatingSigmoid = 2;  // llama.cpp expert_gating_func

enum class InitKind { random, norm, router, bias };

struct TensorInit {
  InitKind kind = InitKind::random;
  double std = 0;
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

  void add(const std::string& name, std::initializer_list<int64_t> ne, InitKind kind, double std, uint32_t block) {
    const Preset& p = plan.preset;
    QuantModelInfo qi{p.n_layer, p.n_head, p.n_head_kv, p.n_expert};
    GgmlType type = kind == InitKind::random
                        ? choose_tensor_type(*plan.file_type, qi, name, ne.begin(), static_cast<uint32_t>(ne.size()))
                        : GgmlType::F32;
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
  void norm(const std::string& name, int64_t n, uint32_t block) { add(name, {n}, InitKind::norm, 0, block); }
};

std::string blk(uint32_t i, const char* what) { return "blk." + std::to_string(i) + "." + what; }

void add_keys(const SynthPlan& plan, const SynthOptions& o, GgufStreamWriter& w) {
  const Preset& p = plan.preset;
  const std::string a = p.arch_name + ".";
  w.add_string("general.architecture", p.arch_name);
  w.add_string("general.name", "synth-" + p.name + "-" + std::to_string(p.n_layer) + "L");
  if (o.vocab_path.empty()) add_builtin_vocab(w, p, plan.n_vocab);
  else copy_vocab(w, p, o.vocab_path);
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
  for (uint32_t i = 0; i < p.n_layer; ++i) {
    d.norm(blk(i, "attn_norm.weight"), E, i);
    int64_t attn_out_in = 0;
    if (p.arch == Arch::deepseek2) {
      const int64_t H = p.n_head, qk = p.qk_nope_head_dim + p.qk_rope_head_dim;
      d.matrix(blk(i, "attn_q_a.weight"), {E, p.q_lora_rank}, false, i);
      d.norm(blk(i, "attn_q_a_norm.weight"), p.q_lora_rank, i);
      d.matrix(blk(i, "attn_q_b.weight"), {p.q_lora_rank, H * qk}, false, i);
      d.matrix(blk(i, "attn_kv_a_mqa.weight"), {E, p.kv_lora_rank + p.qk_rope_head_dim}, false, i);
      d.norm(blk(i, "attn_kv_a_norm.weight"), p.kv_lora_rank, i);
      d.matrix(blk(i, "attn_k_b.weight"), {p.qk_nope_head_dim, p.kv_lora_rank, H}, false, i);
      d.matrix(blk(i, "attn_v_b.weight"), {p.kv_lora_rank, p.v_head_dim, H}, false, i);
      attn_out_in = H * p.v_head_dim;
    } else {
      const int64_t hd = p.head_dim;
      d.matrix(blk(i, "attn_q.weight"), {E, p.n_head * hd}, false, i);
      d.matrix(blk(i, "attn_k.weight"), {E, p.n_head_kv * hd}, false, i);
      d.matrix(blk(i, "attn_v.weight"), {E, p.n_head_kv * hd}, false, i);
      if (p.arch == Arch::qwen3moe) {
        d.norm(blk(i, "attn_q_norm.weight"), hd, i);
        d.norm(blk(i, "attn_k_norm.weight"), hd, i);
      }
      attn_out_in = p.n_head * hd;
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
    if (i < p.n_layer_dense_lead) {
      d.matrix(blk(i, "ffn_gate.weight"), {E, p.n_ff}, false, i);
      d.matrix(blk(i, "ffn_up.weight"), {E, p.n_ff}, false, i);
      d.matrix(blk(i, "ffn_down.weight"), {p.n_ff, E}, true, i);
      continue;
    }
    const int64_t X = p.n_expert, F = p.n_ff_exp;
    d.add(blk(i, "ffn_gate_inp.weight"), {E, X}, InitKind::router, 0, i);
    if (p.gating == Gating::sigmoid) d.add(blk(i, "exp_probs_b.bias"), {X}, InitKind::bias, 0, i);
    d.matrix(blk(i, "ffn_gate_exps.weight"), {E, F, X}, false, i);
    d.matrix(blk(i, "ffn_up_exps.weight"), {E, F, X}, false, i);
    d.matrix(blk(i, "ffn_down_exps.weight"), {F, E, X}, true, i);
    if (p.n_expert_shared > 0) {
      const int64_t S = F * p.n_expert_shared;
      d.matrix(blk(i, "ffn_gate_shexp.weight"), {E, S}, false, i);
      d.matrix(blk(i, "ffn_up_shexp.weight"), {E, S}, false, i);
      d.matrix(blk(i, "ffn_down_shexp.weight"), {S, E}, true, i);
    }
  }
  d.norm("output_norm.weight", E, p.n_layer);
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
  plan.preset = reduce(base, o.layers, o.experts);
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
      case InitKind::norm:
        for (uint64_t r = 0; r < n_rows; ++r) {
          Rng rng(mix_seed(ti.seed, row0 + r));
          float* f = reinterpret_cast<float*>(dst.data() + r * t.row_bytes);
          for (int64_t i = 0; i < t.ne[0]; ++i) f[i] = static_cast<float>(0.8 + 0.4 * rng.uniform());
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
  w.write(o.out, fill, progress);
  res.bytes = w.file_bytes();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace sluice::core::synth
