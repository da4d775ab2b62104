#include "core/llama/model.h"

#include <cstdlib>
#include <cstring>
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

enum class Conversion { copy, to_f32, kv_b_to_k_b, kv_b_to_v_b };

struct Slot {
  Tensor* dst = nullptr;
  const GgufTensorInfo* src = nullptr;
  Conversion conv = Conversion::copy;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool mapped = false;  // used in place in LoadOptions::mapping, no arena bytes
};

bool is_routed_expert(const std::string& name) {
  return name.find("_exps.") != std::string::npos;
}

}  // namespace

class ModelLoader {
 public:
  ModelLoader(io::Reader& reader, const LoadOptions& options) : reader_(reader), options_(options) {}

  Model run(bool read = true) {
    Model m;
    m.gguf_ = std::make_unique<GgufFile>(GgufFile::parse(reader_));
    const GgufFile& f = *m.gguf_;
    m.config_ = ModelConfig::from_gguf(f);
    const ModelConfig& c = m.config_;
    check_tensors(c, f);
    m.layers_.resize(static_cast<size_t>(c.n_layer));
    m.has_routed_experts_ = options_.load_routed_experts;

    model_ = &m;
    // The table's rows are read per token when the head is a tensor of its own (embedding_rows.h).
    const GgufTensorInfo* embd_in_file =
        embeddings_stay_in_file(f, options_.embeddings_from_file && !options_.widen_f16_to_f32, &m.token_embd_);
    if (!embd_in_file) plan(f, "token_embd.weight", &m.token_embd_);
    plan(f, "output_norm.weight", &m.output_norm_);
    plan(f, "output.weight", &m.output_, c.n_layer);
    for (int64_t il = 0; il < c.n_layer; ++il) {
      LayerWeights& L = m.layers_[static_cast<size_t>(il)];
      const std::string b = "blk." + std::to_string(il) + ".";
      auto p = [&](const char* name, Tensor* t) { plan(f, b + name, t, il, member_of(L, t)); };
      p("attn_norm.weight", &L.attn_norm);
      p("ffn_norm.weight", &L.ffn_norm);
      p("attn_q.weight", &L.wq);
      p("attn_k.weight", &L.wk);
      p("attn_v.weight", &L.wv);
      p("attn_output.weight", &L.wo);
      p("attn_q_norm.weight", &L.q_norm);
      p("attn_k_norm.weight", &L.k_norm);
      p("attn_q_a.weight", &L.wq_a);
      p("attn_q_a_norm.weight", &L.q_a_norm);
      p("attn_q_b.weight", &L.wq_b);
      p("attn_kv_a_mqa.weight", &L.wkv_a_mqa);
      p("attn_kv_a_norm.weight", &L.kv_a_norm);
      if (c.is_mla() && !c.mla_split_kv_b) {
        plan_kv_b(f, b + "attn_kv_b.weight", c, &L.wk_b, &L.wv_b);
      } else {
        p("attn_k_b.weight", &L.wk_b);
        p("attn_v_b.weight", &L.wv_b);
      }
      if (c.is_moe_layer(il)) {
        p("ffn_gate_inp.weight", &L.gate_inp);
        p("exp_probs_b.bias", &L.exp_probs_b);
        p("ffn_gate_exps.weight", &L.gate_exps);
        p("ffn_up_exps.weight", &L.up_exps);
        p("ffn_down_exps.weight", &L.down_exps);
        p("ffn_gate_shexp.weight", &L.gate_shexp);
        p("ffn_up_shexp.weight", &L.up_shexp);
        p("ffn_down_shexp.weight", &L.down_shexp);
      } else {
        p("ffn_gate.weight", &L.ffn_gate);
        p("ffn_up.weight", &L.ffn_up);
        p("ffn_down.weight", &L.ffn_down);
      }
    }

    m.arena_bytes_ = weight_arena_bytes(total_);
    m.mapped_bytes_ = mapped_;
    m.mapping_ = options_.mapping;
    if (!read) {
      if (!f.find_tensor("output.weight")) m.output_ = m.token_embd_;
      return m;
    }
    m.arena_ = allocate_weight_arena(total_, "the weights of '" + f.path() + "'");
    {
      BackgroundPrefault prefault({m.arena_.get(), total_}, std::thread::hardware_concurrency());
      for (Slot& s : slots_) fill(s, m.arena_.get(), c);
    }
    m.embeddings_ = embd_in_file ? EmbeddingRows(m.token_embd_, reader_.path(), embd_in_file->file_offset)
                                : EmbeddingRows(m.token_embd_);
    if (!f.find_tensor("output.weight")) m.output_ = m.token_embd_;
    return m;
  }

 private:
  void reserve(Slot s) {
    if (s.conv == Conversion::copy && mappable(options_.mapping.get(), *s.src, kTensorAlign)) {
      s.mapped = true;
      mapped_ = checked_add(mapped_, s.bytes, "mapped weight bytes");
      slots_.push_back(s);
      return;
    }
    // A tensor copied as stored is placed so that the O_DIRECT read lands in it (weight_arena.h).
    s.offset = s.conv == Conversion::copy ? place_for_direct_read(total_, s.src->file_offset, s.bytes, kTensorAlign)
                                          : total_;
    total_ = checked_add(s.offset, (s.bytes + kAlign - 1) / kAlign * kAlign, "model weight bytes");
    slots_.push_back(s);
  }

  static Tensor LayerWeights::*member_of(LayerWeights& L, Tensor* t) {
    static constexpr Tensor LayerWeights::*kMembers[] = {
        &LayerWeights::attn_norm, &LayerWeights::ffn_norm,   &LayerWeights::wq,         &LayerWeights::wk,
        &LayerWeights::wv,        &LayerWeights::wo,         &LayerWeights::q_norm,     &LayerWeights::k_norm,
        &LayerWeights::wq_a,      &LayerWeights::q_a_norm,   &LayerWeights::wq_b,       &LayerWeights::wkv_a_mqa,
        &LayerWeights::kv_a_norm, &LayerWeights::wk_b,       &LayerWeights::wv_b,       &LayerWeights::ffn_gate,
        &LayerWeights::ffn_up,    &LayerWeights::ffn_down,   &LayerWeights::gate_inp,   &LayerWeights::exp_probs_b,
        &LayerWeights::gate_exps, &LayerWeights::up_exps,    &LayerWeights::down_exps,  &LayerWeights::gate_shexp,
        &LayerWeights::up_shexp,  &LayerWeights::down_shexp};
    for (auto m : kMembers)
      if (&(L.*m) == t) return m;
    throw Error(ErrorCode::internal, "tensor field outside LayerWeights");
  }

  // `block` and `member` say where a streamed tensor belongs (block n_layer: the output head).
  void plan(const GgufFile& f, const std::string& name, Tensor* dst, int64_t block = -1,
            Tensor LayerWeights::*member = nullptr) {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (!t) return;
    dst->type = t->type;
    dst->ne = t->ne;
    dst->row_bytes = t->row_bytes;
    if (!options_.load_routed_experts && is_routed_expert(name)) {
      return;  // data stays null: an ExpertSource provides it
    }
    Slot s{dst, t, Conversion::copy, 0, t->n_bytes};
    const bool one_d = t->n_dims == 1;
    if (t->type != GgmlType::F32 && (one_d || (options_.widen_f16_to_f32 && t->type == GgmlType::F16))) {
      s.conv = Conversion::to_f32;
      s.bytes = checked_mul(t->n_elements, 4, name);
      dst->type = GgmlType::F32;
      dst->row_bytes = static_cast<size_t>(t->ne[0]) * 4;
    }
    if (options_.stream_layer_tensors && block >= 0 && s.conv == Conversion::copy && !is_routed_expert(name)) {
      model_->streamed_.push_back({block, member, t});
      return;  // data stays null: a LayerSource provides it
    }
    reserve(s);
  }

  // attn_kv_b [kv_lora, n_head * (qk_nope + v_head)] -> attn_k_b + attn_v_b.
  void plan_kv_b(const GgufFile& f, const std::string& name, const ModelConfig& c, Tensor* k_b, Tensor* v_b) {
    const GgufTensorInfo& t = f.tensor(name);
    const bool float_type = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16;
    const bool widen = options_.widen_f16_to_f32 && t.type == GgmlType::F16;
    k_b->type = float_type && !widen ? t.type : GgmlType::F32;
    k_b->ne = {c.qk_nope, c.kv_lora_rank, c.n_head, 1};
    k_b->row_bytes = ggml_row_bytes(k_b->type, static_cast<uint64_t>(c.qk_nope));
    reserve(Slot{k_b, &t, Conversion::kv_b_to_k_b, 0, k_b->row_bytes * c.kv_lora_rank * c.n_head});
    v_b->type = widen ? GgmlType::F32 : t.type;
    v_b->ne = {c.kv_lora_rank, c.v_head_dim, c.n_head, 1};
    v_b->row_bytes = ggml_row_bytes(v_b->type, static_cast<uint64_t>(c.kv_lora_rank));
    reserve(Slot{v_b, &t, Conversion::kv_b_to_v_b, 0, v_b->row_bytes * c.v_head_dim * c.n_head});
  }

  void fill(Slot& s, std::byte* arena, const ModelConfig& c) {
    std::byte* dst = arena + s.offset;
    const GgufTensorInfo& t = *s.src;
    Tensor& out = *s.dst;
    if (s.mapped) {
      out.data = map_checked(*options_.mapping, reader_.path(), t, options_.check_tensor).data();
      return;
    }
    if (s.conv == Conversion::copy) {
      read_checked(reader_, t, {dst, t.n_bytes}, options_.check_tensor);
      out.type = t.type;
      out.ne = t.ne;
      out.row_bytes = t.row_bytes;
      out.data = dst;
      return;
    }
    raw_.resize(t.n_bytes);
    read_checked(reader_, t, raw_, options_.check_tensor);
    const int64_t rows = static_cast<int64_t>(t.n_elements) / t.ne[0];
    if (s.conv == Conversion::to_f32) {
      float* y = reinterpret_cast<float*>(dst);
      for (int64_t r = 0; r < rows; ++r)
        kernels::dequantize_row(t.type, raw_.data() + r * t.row_bytes, y + r * t.ne[0], t.ne[0]);
      out.type = GgmlType::F32;
      out.ne = t.ne;
      out.row_bytes = static_cast<size_t>(t.ne[0]) * 4;
      out.data = dst;
      return;
    }
    const int64_t L = c.kv_lora_rank, N = c.qk_nope, V = c.v_head_dim;
    if (s.conv == Conversion::kv_b_to_v_b) {
      for (int64_t h = 0; h < c.n_head; ++h)
        for (int64_t e = 0; e < V; ++e) {
          const std::byte* src = raw_.data() + (h * (N + V) + N + e) * t.row_bytes;
          std::byte* d = dst + (h * V + e) * out.row_bytes;
          if (out.type == t.type) std::memcpy(d, src, t.row_bytes);
          else kernels::dequantize_row(t.type, src, reinterpret_cast<float*>(d), L);
        }
      out.data = dst;
      return;
    }
    // k_b[h][c][d] = kv_b[h * (N + V) + d][c]
    std::vector<float> rows_f(static_cast<size_t>(N * L));
    std::vector<float> col(static_cast<size_t>(N));
    for (int64_t h = 0; h < c.n_head; ++h) {
      for (int64_t d = 0; d < N; ++d)
        kernels::dequantize_row(t.type, raw_.data() + (h * (N + V) + d) * t.row_bytes, rows_f.data() + d * L, L);
      for (int64_t cc = 0; cc < L; ++cc) {
        for (int64_t d = 0; d < N; ++d) col[static_cast<size_t>(d)] = rows_f[static_cast<size_t>(d * L + cc)];
        kernels::quantize_row(out.type, col.data(), dst + (h * L + cc) * out.row_bytes, N);
      }
    }
    out.data = dst;
  }

  io::Reader& reader_;
  LoadOptions options_;
  Model* model_ = nullptr;
  std::vector<Slot> slots_;
  uint64_t total_ = 0;
  uint64_t mapped_ = 0;
  std::vector<std::byte> raw_;
};

Model Model::load(io::Reader& reader, const LoadOptions& options) {
  return ModelLoader(reader, options).run();
}

Model Model::plan(io::Reader& reader, const LoadOptions& options) {
  return ModelLoader(reader, options).run(false);
}

Model Model::load(const std::string& path, const LoadOptions& options) {
  io::PreadReader reader(path);
  return load(reader, options);
}

}  // namespace sluice::core
