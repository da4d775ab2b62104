#include "synth/synth_preset.h"

#include <algorithm>

#include "common/error.h"

namespace sluice::core::synth {
namespace {

// Values from each model's config.json (Hugging Face) and what llama.cpp's convert_hf_to_gguf.py
// derives from it (head_count_kv = 1 and the MLA key/value lengths for deepseek2; yarn log
// multiplier = 0.1 * mscale_all_dim).
Preset make_deepseek2(std::string name, std::string model_name) {
  Preset p;
  p.name = std::move(name);
  p.model_name = std::move(model_name);
  p.arch = Arch::deepseek2;
  p.arch_name = "deepseek2";
  p.n_layer = 61;
  p.n_embd = 7168;
  p.n_head = 64;
  p.n_head_kv = 1;
  p.q_lora_rank = 1536;
  p.kv_lora_rank = 512;
  p.qk_nope_head_dim = 128;
  p.qk_rope_head_dim = 64;
  p.v_head_dim = 128;
  p.n_ff = 18432;
  p.n_ff_exp = 2048;
  p.n_expert_used = 8;
  p.n_expert_shared = 1;
  p.gating = Gating::sigmoid;
  p.expert_weights_norm = true;
  p.rope_dim = 64;
  p.yarn_orig_ctx = 4096;
  p.yarn_log_multiplier = 0.1f;
  p.rms_eps = 1e-6f;
  p.add_bos = true;
  return p;
}

std::vector<Preset> make_presets() {
  std::vector<Preset> v;

  Preset kimi = make_deepseek2("kimi-k2", "Kimi-K2-Instruct");
  kimi.n_layer_dense_lead = 1;
  kimi.n_vocab = 163840;
  kimi.n_ctx_train = 131072;
  kimi.n_expert = 384;
  kimi.n_group = 1;
  kimi.n_group_used = 1;
  kimi.expert_weights_scale = 2.827f;
  kimi.rope_freq_base = 50000.0f;
  kimi.yarn_factor = 32.0f;
  kimi.tokenizer_pre = "kimi-k2";
  kimi.chat_template = std::string(kimi_k2_chat_template());
  v.push_back(kimi);

  // Kimi K3: the real values of shared/reference/kimi-k3/README.md (published config and
  // llama.cpp's converter). The context length is not given there; 131072 is an assumption.
  Preset k3 = make_deepseek2("kimi-k3", "Kimi-K3");
  k3.arch = Arch::kimi_k3;
  k3.arch_name = "kimi-k3";
  k3.default_quant = "MXFP4_MOE";  // its experts ship as MXFP4
  k3.n_layer = 93;
  k3.n_layer_dense_lead = 1;
  k3.n_vocab = 163840;
  k3.n_ctx_train = 131072;
  k3.n_head = 96;
  k3.n_head_kv = 1;
  k3.n_ff = 33792;
  k3.n_ff_exp = 3072;
  k3.n_latent = 3584;
  k3.n_expert = 896;
  k3.n_expert_used = 16;
  k3.n_expert_shared = 2;
  k3.n_group = 1;
  k3.n_group_used = 1;
  k3.expert_weights_scale = 1.0f;
  k3.kda_head_dim = 128;
  k3.ssm_conv_kernel = 4;
  k3.kda_gate_lower_bound = -5.0f;
  k3.situ_beta = 4.0f;
  k3.situ_linear_beta = 25.0f;
  k3.attn_res_block_size = 12;
  k3.rms_eps = 1e-5f;
  k3.yarn_factor = 0.0f;
  k3.tokenizer_pre = "kimi-k2";
  k3.chat_template = std::string(kimi_k3_chat_template());
  v.push_back(k3);

  Preset dsv3 = make_deepseek2("deepseek-v3", "DeepSeek-V3");
  dsv3.n_layer_dense_lead = 3;
  dsv3.n_vocab = 129280;
  dsv3.n_ctx_train = 163840;
  dsv3.n_expert = 256;
  dsv3.n_group = 8;
  dsv3.n_group_used = 4;
  dsv3.expert_weights_scale = 2.5f;
  dsv3.rope_freq_base = 10000.0f;
  dsv3.yarn_factor = 40.0f;
  dsv3.tokenizer_pre = "deepseek-v3";
  dsv3.chat_template = std::string(deepseek_v3_chat_template());
  v.push_back(dsv3);

  Preset q30;
  q30.name = "qwen3-30b-a3b";
  q30.model_name = "Qwen3-30B-A3B";
  q30.arch = Arch::qwen3moe;
  q30.arch_name = "qwen3moe";
  q30.n_layer = 48;
  q30.n_embd = 2048;
  q30.n_vocab = 151936;
  q30.n_ctx_train = 40960;
  q30.n_head = 32;
  q30.n_head_kv = 4;
  q30.head_dim = 128;
  q30.n_ff = 6144;
  q30.n_ff_exp = 768;
  q30.n_expert = 128;
  q30.n_expert_used = 8;
  q30.gating = Gating::softmax;
  q30.rope_freq_base = 1000000.0f;
  q30.rms_eps = 1e-6f;
  q30.tokenizer_pre = "qwen2";
  q30.add_bos = false;
  q30.chat_template = std::string(qwen3_chat_template());
  v.push_back(q30);

  Preset q235 = q30;
  q235.name = "qwen3-235b-a22b";
  q235.model_name = "Qwen3-235B-A22B";
  q235.n_layer = 94;
  q235.n_embd = 4096;
  q235.n_head = 64;
  q235.n_head_kv = 4;
  q235.n_ff = 12288;
  q235.n_ff_exp = 1536;
  v.push_back(q235);

  Preset mix;
  mix.name = "mixtral-8x7b";
  mix.model_name = "Mixtral-8x7B-Instruct-v0.1";
  mix.arch = Arch::llama;
  mix.arch_name = "llama";
  mix.n_layer = 32;
  mix.n_embd = 4096;
  mix.n_vocab = 32000;
  mix.n_ctx_train = 32768;
  mix.n_head = 32;
  mix.n_head_kv = 8;
  mix.head_dim = 128;
  mix.n_ff = 14336;
  mix.n_ff_exp = 14336;
  mix.n_expert = 8;
  mix.n_expert_used = 2;
  mix.gating = Gating::softmax;
  mix.rope_freq_base = 1000000.0f;
  mix.rope_dim = 128;
  mix.rms_eps = 1e-5f;
  mix.tokenizer_pre = "default";
  mix.add_bos = true;
  mix.chat_template = std::string(mixtral_chat_template());
  v.push_back(mix);

  // The reference models' shapes (shared/reference/tiny/*/config.json): small files for tests,
  // and a direct comparison with what llama.cpp's own tools wrote for the same shapes.
  Preset tds = make_deepseek2("tiny-deepseek2", "tiny-random-deepseek2");
  tds.n_layer = 3;
  tds.n_layer_dense_lead = 1;
  tds.n_embd = 256;
  tds.n_vocab = 2048;
  tds.n_ctx_train = 131072;
  tds.n_head = 4;
  tds.q_lora_rank = 256;
  tds.kv_lora_rank = 256;
  tds.n_ff = 512;
  tds.n_ff_exp = 256;
  tds.n_expert = 16;
  tds.n_expert_used = 4;
  tds.n_group = 4;
  tds.n_group_used = 2;
  tds.expert_weights_scale = 2.827f;
  tds.rope_freq_base = 50000.0f;
  tds.yarn_factor = 32.0f;
  tds.tokenizer_pre = "gpt-2";
  v.push_back(tds);

  Preset tq = q30;
  tq.name = "tiny-qwen3moe";
  tq.model_name = "tiny-random-qwen3moe";
  tq.n_layer = 2;
  tq.n_embd = 256;
  tq.n_vocab = 2048;
  tq.n_head = 4;
  tq.n_head_kv = 2;
  tq.head_dim = 64;
  tq.n_ff = 768;
  tq.n_ff_exp = 256;
  tq.n_expert = 8;
  tq.n_expert_used = 2;
  v.push_back(tq);

  Preset tl = mix;
  tl.name = "tiny-llama-moe";
  tl.model_name = "tiny-random-llama-moe";
  tl.n_layer = 2;
  tl.n_embd = 256;
  tl.n_vocab = 2048;
  tl.n_head = 4;
  tl.n_head_kv = 2;
  tl.head_dim = 64;
  tl.rope_dim = 64;
  tl.n_ff = 512;
  tl.n_ff_exp = 512;
  tl.n_expert = 4;
  tl.n_expert_used = 2;
  v.push_back(tl);

  Preset tk3 = k3;
  tk3.name = "tiny-kimi-k3";
  tk3.model_name = "tiny-random-kimi-k3";
  tk3.default_quant = "Q4_K_M";
  tk3.n_layer = 4;
  tk3.n_embd = 256;
  tk3.n_vocab = 2048;
  tk3.n_ctx_train = 4096;
  tk3.n_head = 2;
  tk3.q_lora_rank = 256;
  tk3.kv_lora_rank = 256;
  tk3.n_ff = 512;
  tk3.n_ff_exp = 256;
  tk3.n_latent = 256;
  tk3.n_expert = 8;
  tk3.n_expert_used = 3;
  tk3.expert_weights_scale = 2.5f;
  tk3.situ_beta = 2.0f;
  tk3.situ_linear_beta = 3.0f;
  tk3.attn_res_block_size = 2;
  tk3.tokenizer_pre = "gpt-2";
  tk3.chat_template.clear();
  v.push_back(tk3);
  return v;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> v = make_presets();
  return v;
}

std::string preset_names() {
  std::string s;
  for (const Preset& p : presets()) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

const Preset& find_preset(std::string_view name) {
  for (const Preset& p : presets())
    if (p.name == name) return p;
  throw Error(ErrorCode::invalid_argument,
              "--preset: unknown preset '" + std::string(name) + "' (known: " + preset_names() + ")");
}

Preset reduce(const Preset& src, uint32_t layers, uint32_t experts, uint32_t expert_ff) {
  Preset p = src;
  if (layers < 1 || layers > src.n_layer)
    throw Error(ErrorCode::invalid_argument, "--layers " + std::to_string(layers) + ": " + src.name + " takes 1 to " +
                std::to_string(src.n_layer) + " layers");
  p.n_layer = layers;
  p.n_layer_dense_lead = std::min(src.n_layer_dense_lead, layers - 1);
  if (experts != 0) {
    if (experts > src.n_expert || experts < 2)
      throw Error(ErrorCode::invalid_argument, "--experts " + std::to_string(experts) + ": " + src.name +
                  " takes 2 to " + std::to_string(src.n_expert) + " routed experts");
    p.n_expert = experts;
    p.n_expert_used = std::min(src.n_expert_used, experts);
    if (p.n_group > 1) {
      while (p.n_group > 1 && (experts % p.n_group != 0 || experts / p.n_group < 2)) p.n_group /= 2;
      p.n_group_used = std::min(p.n_group_used, p.n_group);
      while (p.n_group_used < p.n_group && p.n_group_used * (experts / p.n_group) < p.n_expert_used) ++p.n_group_used;
    }
  }
  if (expert_ff != 0) {
    if (expert_ff % 256 != 0 || expert_ff > src.n_ff_exp)
      throw Error(ErrorCode::invalid_argument, "--expert-ff " + std::to_string(expert_ff) + ": " + src.name +
                  " takes a multiple of 256 (the k-quant block) up to " + std::to_string(src.n_ff_exp));
    // llama-arch MoE (Mixtral) has no separate expert width: its experts are the FFN.
    if (p.arch == Arch::llama) p.n_ff = expert_ff;
    p.n_ff_exp = expert_ff;
  }
  return p;
}

}  // namespace sluice::core::synth
