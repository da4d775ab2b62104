#include "core/gpu/gpu_model_shape.h"

#include <algorithm>
#include <initializer_list>

namespace sluice::core {

namespace {

// Collects one model's shape; every architecture feeds it the same way.
class ShapeBuilder {
 public:
  explicit ShapeBuilder(int64_t n_layer, int64_t n_expert) {
    s_.n_layer = n_layer;
    s_.n_expert = n_expert;
    s_.experts.part_offset.resize(static_cast<size_t>(n_layer));
    s_.experts.part_bytes.resize(static_cast<size_t>(n_layer));
  }

  // Resident matrices, in order of first use. A tensor without a row size is absent; a vector
  // (every dimension past the first is 1) is not a product. Only tensors in memory are listed
  // (they are what VRAM can copy), but every present one widens max_dim, so that a planned model
  // sizes the staging as the loaded one does.
  void resident(std::initializer_list<const Tensor*> tensors) {
    for (const Tensor* t : tensors) {
      if (t->row_bytes == 0 || t->ne[1] <= 0 || (t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1)) continue;
      const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
      s_.max_dim = std::max({s_.max_dim, t->ne[0], rows});
      if (*t) s_.resident.push_back({t, static_cast<uint64_t>(rows) * t->row_bytes});
    }
  }

  // Block il's routed experts: one expert is one [ne0, ne1] slice of each of gate, up and down.
  void experts(int64_t il, const Tensor& gate, const Tensor& up, const Tensor& down, int64_t n_expert) {
    const Tensor* parts[] = {&gate, &up, &down};
    uint64_t at = 0;
    for (size_t p = 0; p < 3; ++p) {
      const uint64_t bytes = static_cast<uint64_t>(parts[p]->ne[1]) * parts[p]->row_bytes;
      s_.experts.part_offset[static_cast<size_t>(il)][p] = at;
      s_.experts.part_bytes[static_cast<size_t>(il)][p] = bytes;
      at += vram_align(bytes);
      s_.max_dim = std::max({s_.max_dim, parts[p]->ne[0], parts[p]->ne[1]});
    }
    s_.experts.slot_bytes = std::max(s_.experts.slot_bytes, at);
    s_.experts.routed_experts += static_cast<uint64_t>(n_expert);
  }

  GpuModelShape take() { return std::move(s_); }

 private:
  GpuModelShape s_;
};

}  // namespace

GpuModelShape gpu_model_shape(const Model& model) {
  const ModelConfig& c = model.config();
  ShapeBuilder b(c.n_layer, c.n_expert);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = model.layer(il);
    b.resident({&L.wq_a, &L.wq_b, &L.wq, &L.wk, &L.wv, &L.wkv_a_mqa, &L.wk_b, &L.wv_b, &L.wo, &L.gate_inp, &L.ffn_up,
                &L.ffn_gate, &L.ffn_down, &L.up_shexp, &L.gate_shexp, &L.down_shexp});
    if (c.is_moe_layer(il) && c.n_expert > 0) b.experts(il, L.gate_exps, L.up_exps, L.down_exps, c.n_expert);
  }
  b.resident({&model.output()});
  return b.take();
}

GpuModelShape gpu_model_shape(const KimiK3Model& model) {
  const KimiK3Config& c = model.config();
  ShapeBuilder b(c.n_layer, c.n_expert);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const KimiK3Layer& L = model.layer(il);
    if (c.is_kda(il))
      b.resident({&L.wq, &L.wk, &L.wv, &L.f_a, &L.f_b, &L.w_beta, &L.w_g, &L.wo});
    else
      b.resident({&L.wq_a, &L.wq_b, &L.wq, &L.wkv_a_mqa, &L.wk_b, &L.wv_b, &L.w_gate, &L.wo});
    if (!c.is_moe_layer(il)) {
      b.resident({&L.ffn_gate, &L.ffn_up, &L.ffn_down});
      continue;
    }
    b.resident({&L.gate_inp, &L.routed_down});
    b.experts(il, L.gate_exps, L.up_exps, L.down_exps, c.n_expert);
    b.resident({&L.gate_shexp, &L.up_shexp, &L.down_shexp, &L.routed_up});
  }
  b.resident({&model.output()});
  return b.take();
}

}  // namespace sluice::core
