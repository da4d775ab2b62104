#include "core/kimi_k3/kimi_k3_model.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "common/background_prefault.h"
#include "common/error.h"
#include "common/units.h"
#include "common/weight_arena.h"
#include "io/pread_reader.h"
#include "kernels/quant.h"

namespace sluice::core {


namespace {

constexpr uint64_t kAlign = 64;
// The alignment a tensor placed for a direct read keeps: GGUF's default (the kernels load unaligned).
constexpr uint64_t kTensorAlign = 32;

struct Slot {
  Tensor* dst = nullptr;
  const GgufTensorInfo* src = nullptr;
  bool to_f32 = false;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool mapped = false;  // used in place in KimiK3LoadOptions::mapping, no arena bytes
};

bool is_routed_expert(const std::string& name) { return name.find("_exps.") != std::string::npos; }

}  // namespace

class KimiK3Loader {
 public:
  KimiK3Loader(io::Reader& reader, const KimiK3LoadOptions& options) : reader_(reader), options_(options) {}

  // `read`: false plans only (sizes, types, the streamed list; no allocation, no data).
  std::unique_ptr<KimiK3Model> run(bool read) {
    auto m = std::unique_ptr<KimiK3Model>(new KimiK3Model());
    m->gguf_ = std::make_unique<GgufFile>(GgufFile::parse(reader_));
    const GgufFile& f = *m->gguf_;
    m->config_ = KimiK3Config::from_gguf(f);
    const KimiK3Config& c = m->config_;
    check_kimi_k3_tensors(c, f);
    m->has_routed_experts_ = options_.load_routed_experts;
    m->layers_.resize(static_cast<size_t>(c.n_layer));
    model_ = m.get();

    // The table's rows are read per token when the head is a tensor of its own (embedding_rows.h).
    const GgufTensorInfo* embd_in_file =
        embeddings_stay_in_file(f, options_.embeddings_from_file && !options_.widen_f16_to_f32, &m->token_embd_);
    if (!embd_in_file) plan(f, "token_embd.weight", &m->token_embd_);
    plan(f, "output_norm.weight", &m->output_norm_);
    plan(f, "output.weight", &m->output_, false, c.n_layer);  // the head streams as unit n_layer
    plan(f, "output_res_score.weight", &m->output_res_score_);
    for (int64_t il = 0; il < c.n_layer; ++il) plan_block(f, c, il);

    m->arena_bytes_ = weight_arena_bytes(total_);
    m->mapped_bytes_ = mapped_;
    m->mapping_ = options_.mapping;
    if (!read) return m;
    m->arena_ = allocate_weight_arena(total_, "the weights of '" + f.path() + "'");
    {
      BackgroundPrefault prefault({m->arena_.get(), total_}, std::thread::hardware_concurrency());
      for (Slot& s : slots_) fill(s, m->arena_.get());
    }
    m->embeddings_ = embd_in_file ? EmbeddingRows(m->token_embd_, reader_.path(), embd_in_file->file_offset)
                                : EmbeddingRows(m->token_embd_);
    return m;
  }

 private:
  using Field = Tensor KimiK3Layer::*;

  void plan_block(const GgufFile& f, const KimiK3Config& c, int64_t il) {
    KimiK3Layer& L = model_->layers_[static_cast<size_t>(il)];
    const std::string b = "blk." + std::to_string(il) + ".";
    auto p = [&](const char* name, Field field, bool f32 = false) { plan(f, b + name, &(L.*field), f32, il, field); };
    p("attn_norm.weight", &KimiK3Layer::attn_norm);
    p("ffn_norm.weight", &KimiK3Layer::ffn_norm);
    p("attn_res_score.weight", &KimiK3Layer::attn_res_score);
    p("ffn_res_score.weight", &KimiK3Layer::ffn_res_score);
    p("attn_output.weight", &KimiK3Layer::wo);
    if (c.is_kda(il)) {
      p("ssm_conv1d_q.weight", &KimiK3Layer::conv_q, true);
      p("ssm_conv1d_k.weight", &KimiK3Layer::conv_k, true);
      p("ssm_conv1d_v.weight", &KimiK3Layer::conv_v, true);
      p("attn_q.weight", &KimiK3Layer::wq);
      p("attn_k.weight", &KimiK3Layer::wk);
      p("attn_v.weight", &KimiK3Layer::wv);
      p("ssm_f_a.weight", &KimiK3Layer::f_a);
      p("ssm_f_b.weight", &KimiK3Layer::f_b);
      p("ssm_beta.weight", &KimiK3Layer::w_beta);
      p("ssm_a", &KimiK3Layer::ssm_a);
      p("ssm_dt.bias", &KimiK3Layer::dt_bias);
      p("ssm_g.weight", &KimiK3Layer::w_g);
      p("ssm_norm.weight", &KimiK3Layer::ssm_norm);
    } else {
      p("attn_q.weight", &KimiK3Layer::wq);
      p("attn_q_a.weight", &KimiK3Layer::wq_a);
      p("attn_q_a_norm.weight", &KimiK3Layer::q_a_norm);
      p("attn_q_b.weight", &KimiK3Layer::wq_b);
      p("attn_kv_a_mqa.weight", &KimiK3Layer::wkv_a_mqa);
      p("attn_kv_a_norm.weight", &KimiK3Layer::kv_a_norm);
      p("attn_k_b.weight", &KimiK3Layer::wk_b);
      p("attn_v_b.weight", &KimiK3Layer::wv_b);
      p("attn_gate.weight", &KimiK3Layer::w_gate);
    }
    if (!c.is_moe_layer(il)) {
      p("ffn_gate.weight", &KimiK3Layer::ffn_gate);
      p("ffn_up.weight", &KimiK3Layer::ffn_up);
      p("ffn_down.weight", &KimiK3Layer::ffn_down);
    } else {
      p("ffn_gate_inp.weight", &KimiK3Layer::gate_inp, true);
      p("exp_probs_b.bias", &KimiK3Layer::exp_probs_b);
      p("ffn_gate_exps.weight", &KimiK3Layer::gate_exps);
      p("ffn_up_exps.weight", &KimiK3Layer::up_exps);
      p("ffn_down_exps.weight", &KimiK3Layer::down_exps);
      p("ffn_routed_down.weight", &KimiK3Layer::routed_down);
      p("ffn_routed_up.weight", &KimiK3Layer::routed_up);
      p("ffn_routed_norm.weight", &KimiK3Layer::routed_norm);
      p("ffn_gate_shexp.weight", &KimiK3Layer::gate_shexp);
      p("ffn_up_shexp.weight", &KimiK3Layer::up_shexp);
      p("ffn_down_shexp.weight", &KimiK3Layer::down_shexp);
    }
  }

  // `block` >= 0: a block's tensor (n_layer: the output head), which streams when asked to and
  // used as stored; `field` is its place in KimiK3Layer (null for the head).
  void plan(const GgufFile& f, const std::string& name, Tensor* dst, bool force_f32 = false, int64_t block = -1,
            Field field = nullptr) {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (!t) return;
    dst->type = t->type;
    dst->ne = t->ne;
    dst->row_bytes = t->row_bytes;
    if (is_routed_expert(name)) {
      if (!options_.load_routed_experts) return;  // an ExpertSource streams it
    }
    Slot s{dst, t, false, 0, t->n_bytes};
    const bool one_d = t->n_dims == 1;
    if (t->type != GgmlType::F32 &&
        (one_d || force_f32 || (options_.widen_f16_to_f32 && t->type == GgmlType::F16))) {
      s.to_f32 = true;
      s.bytes = checked_mul(t->n_elements, 4, name);
      dst->type = GgmlType::F32;  // the in-memory type, planned or loaded
      dst->row_bytes = static_cast<size_t>(t->ne[0]) * 4;
    }
    if (options_.stream_layer_tensors && block >= 0 && !s.to_f32 && !is_routed_expert(name)) {
      model_->streamed_.push_back({block, field, t});
      return;  // data stays null: a LayerSource provides it
    }
    if (!s.to_f32 && mappable(options_.mapping.get(), *t, kTensorAlign)) {
      s.mapped = true;
      mapped_ = checked_add(mapped_, s.bytes, "mapped weight bytes");
      slots_.push_back(s);
      return;
    }
    // A tensor read as stored is placed so that the O_DIRECT read lands in it (weight_arena.h).
    s.offset = s.to_f32 ? total_ : place_for_direct_read(total_, s.src->file_offset, s.bytes, kTensorAlign);
    total_ = checked_add(s.offset, (s.bytes + kAlign - 1) / kAlign * kAlign, "model weight bytes");
    slots_.push_back(s);
  }

  void fill(Slot& s, std::byte* arena) {
    std::byte* dst = arena + s.offset;
    Tensor& out = *s.dst;
    const GgufTensorInfo& t = *s.src;
    if (s.mapped) {
      out.data = map_checked(*options_.mapping, reader_.path(), t, options_.check_tensor).data();
      return;
    }
    if (!s.to_f32) {
      read_checked(reader_, t, {dst, t.n_bytes}, options_.check_tensor);
      out.data = dst;
      return;
    }
    raw_.resize(t.n_bytes);
    read_checked(reader_, t, raw_, options_.check_tensor);
    const int64_t rows = static_cast<int64_t>(t.n_elements) / t.ne[0];
    float* y = reinterpret_cast<float*>(dst);
    for (int64_t r = 0; r < rows; ++r)
      kernels::dequantize_row(t.type, raw_.data() + r * t.row_bytes, y + r * t.ne[0], t.ne[0]);
    out.data = dst;
  }

  io::Reader& reader_;
  KimiK3LoadOptions options_;
  KimiK3Model* model_ = nullptr;
  std::vector<Slot> slots_;
  uint64_t total_ = 0;
  uint64_t mapped_ = 0;
  std::vector<std::byte> raw_;
};

std::unique_ptr<KimiK3Model> KimiK3Model::load(io::Reader& reader, const KimiK3LoadOptions& options) {
  return KimiK3Loader(reader, options).run(true);
}

std::unique_ptr<KimiK3Model> KimiK3Model::plan(io::Reader& reader, const KimiK3LoadOptions& options) {
  return KimiK3Loader(reader, options).run(false);
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
