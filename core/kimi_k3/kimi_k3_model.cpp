#include "core/kimi_k3/kimi_k3_model.h"

#include <algorithm>
#include <cstdlib>

#include "common/error.h"
#include "common/units.h"
#include "io/pread_reader.h"
#include "kernels/quant.h"

namespace sluice::core {

void KimiK3Model::Free::operator()(std::byte* p) const { std::free(p); }

namespace {

constexpr uint64_t kAlign = 64;

struct Slot {
  Tensor* dst = nullptr;
  const GgufTensorInfo* src = nullptr;
  bool to_f32 = false;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

bool is_routed_expert(const std::string& name) { return name.find("_exps.") != std::string::npos; }

}  // namespace

class KimiK3Loader {
 public:
  KimiK3Loader(io::Reader& reader, const KimiK3LoadOptions& options) : reader_(reader), options_(options) {}

  std::unique_ptr<KimiK3Model> run() {
    auto m = std::unique_ptr<KimiK3Model>(new KimiK3Model());
    m->gguf_ = std::make_unique<GgufFile>(GgufFile::parse(reader_));
    const GgufFile& f = *m->gguf_;
    m->config_ = KimiK3Config::from_gguf(f);
    const KimiK3Config& c = m->config_;
    check_kimi_k3_tensors(c, f);
    m->has_routed_experts_ = options_.load_routed_experts;
    m->layers_.resize(static_cast<size_t>(c.n_layer));

    plan(f, "token_embd.weight", &m->token_embd_);
    plan(f, "output_norm.weight", &m->output_norm_);
    plan(f, "output.weight", &m->output_);
    plan(f, "output_res_score.weight", &m->output_res_score_);
    for (int64_t il = 0; il < c.n_layer; ++il) {
      KimiK3Layer& L = m->layers_[static_cast<size_t>(il)];
      const std::string b = "blk." + std::to_string(il) + ".";
      auto p = [&](const char* name, Tensor* t, bool f32 = false) { plan(f, b + name, t, f32); };
      p("attn_norm.weight", &L.attn_norm);
      p("ffn_norm.weight", &L.ffn_norm);
      p("attn_res_score.weight", &L.attn_res_score);
      p("ffn_res_score.weight", &L.ffn_res_score);
      p("attn_output.weight", &L.wo);
      if (c.is_kda(il)) {
        p("ssm_conv1d_q.weight", &L.conv_q, true);
        p("ssm_conv1d_k.weight", &L.conv_k, true);
        p("ssm_conv1d_v.weight", &L.conv_v, true);
        p("attn_q.weight", &L.wq);
        p("attn_k.weight", &L.wk);
        p("attn_v.weight", &L.wv);
        p("ssm_f_a.weight", &L.f_a);
        p("ssm_f_b.weight", &L.f_b);
        p("ssm_beta.weight", &L.w_beta);
        p("ssm_a", &L.ssm_a);
        p("ssm_dt.bias", &L.dt_bias);
        p("ssm_g.weight", &L.w_g);
        p("ssm_norm.weight", &L.ssm_norm);
      } else {
        p("attn_q.weight", &L.wq);
        p("attn_q_a.weight", &L.wq_a);
        p("attn_q_a_norm.weight", &L.q_a_norm);
        p("attn_q_b.weight", &L.wq_b);
        p("attn_kv_a_mqa.weight", &L.wkv_a_mqa);
        p("attn_kv_a_norm.weight", &L.kv_a_norm);
        p("attn_k_b.weight", &L.wk_b);
        p("attn_v_b.weight", &L.wv_b);
        p("attn_gate.weight", &L.w_gate);
      }
      if (!c.is_moe_layer(il)) {
        p("ffn_gate.weight", &L.ffn_gate);
        p("ffn_up.weight", &L.ffn_up);
        p("ffn_down.weight", &L.ffn_down);
      } else {
        p("ffn_gate_inp.weight", &L.gate_inp, true);
        p("exp_probs_b.bias", &L.exp_probs_b);
        p("ffn_gate_exps.weight", &L.gate_exps);
        p("ffn_up_exps.weight", &L.up_exps);
        p("ffn_down_exps.weight", &L.down_exps);
        p("ffn_routed_down.weight", &L.routed_down);
        p("ffn_routed_up.weight", &L.routed_up);
        p("ffn_routed_norm.weight", &L.routed_norm);
        p("ffn_gate_shexp.weight", &L.gate_shexp);
        p("ffn_up_shexp.weight", &L.up_shexp);
        p("ffn_down_shexp.weight", &L.down_shexp);
      }
    }

    void* mem = std::aligned_alloc(kAlign, std::max<uint64_t>(total_, kAlign));
    if (!mem)
      throw Error(ErrorCode::budget, "cannot allocate " + human_bytes(total_) + " for the weights of '" + f.path() + "'");
    m->arena_.reset(static_cast<std::byte*>(mem));
    m->arena_bytes_ = total_;
    for (Slot& s : slots_) fill(s, m->arena_.get());
    return m;
  }

 private:
  void plan(const GgufFile& f, const std::string& name, Tensor* dst, bool force_f32 = false) {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (!t) return;
    dst->type = t->type;
    dst->ne = t->ne;
    dst->row_bytes = t->row_bytes;
    if (!options_.load_routed_experts && is_routed_expert(name)) return;  // an ExpertSource streams it
    Slot s{dst, t, false, 0, t->n_bytes};
    const bool one_d = t->n_dims == 1;
    if (t->type != GgmlType::F32 &&
        (one_d || force_f32 || (options_.widen_f16_to_f32 && t->type == GgmlType::F16))) {
      s.to_f32 = true;
      s.bytes = checked_mul(t->n_elements, 4, name);
    }
    s.offset = total_;
    total_ = checked_add(total_, (s.bytes + kAlign - 1) / kAlign * kAlign, "model weight bytes");
    slots_.push_back(s);
  }

  void fill(Slot& s, std::byte* arena) {
    std::byte* dst = arena + s.offset;
    Tensor& out = *s.dst;
    const GgufTensorInfo& t = *s.src;
    if (!s.to_f32) {
      reader_.read_sync(t.file_offset, {dst, t.n_bytes});
      out.data = dst;
      return;
    }
    raw_.resize(t.n_bytes);
    reader_.read_sync(t.file_offset, raw_);
    const int64_t rows = static_cast<int64_t>(t.n_elements) / t.ne[0];
    float* y = reinterpret_cast<float*>(dst);
    for (int64_t r = 0; r < rows; ++r)
      kernels::dequantize_row(t.type, raw_.data() + r * t.row_bytes, y + r * t.ne[0], t.ne[0]);
    out.type = GgmlType::F32;
    out.row_bytes = static_cast<size_t>(t.ne[0]) * 4;
    out.data = dst;
  }

  io::Reader& reader_;
  KimiK3LoadOptions options_;
  std::vector<Slot> slots_;
  uint64_t total_ = 0;
  std::vector<std::byte> raw_;
};

std::unique_ptr<KimiK3Model> KimiK3Model::load(io::Reader& reader, const KimiK3LoadOptions& options) {
  return KimiK3Loader(reader, options).run();
}

std::unique_ptr<KimiK3Model> KimiK3Model::load(const std::string& path, const KimiK3LoadOptions& options) {
  io::PreadReader reader(path);
  return load(reader, options);
}

KimiK3InCoreExperts::KimiK3InCoreExperts(const KimiK3Model& model) : model_(model) {
  if (!model.has_routed_experts())
    throw Error(ErrorCode::invalid_argument, "the model was loaded without its routed experts; use a streaming ExpertSource");
}

ExpertWeights KimiK3InCoreExperts::acquire(int layer, int expert) {
  const KimiK3Layer& L = model_.layer(layer);
  return {L.gate_exps.expert(expert), L.up_exps.expert(expert), L.down_exps.expert(expert)};
}

}  // namespace sluice::core
