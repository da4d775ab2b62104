#include "core/gpu/vram_plan.h"

#include <algorithm>

#include "common/error.h"
#include "common/units.h"

namespace sluice::core {

std::vector<ResidentMatrix> resident_in_use_order(const Model& model) {
  const ModelConfig& c = model.config();
  std::vector<ResidentMatrix> out;
  auto add = [&](const Tensor& t) {
    if (!t || t.ne[1] <= 0) return;
    if (t.ne[1] == 1 && t.ne[2] == 1 && t.ne[3] == 1) return;  // vectors (norms, biases) are not products
    const uint64_t rows = static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    out.push_back({&t, rows * t.row_bytes});
  };
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = model.layer(il);
    for (const Tensor* t : {&L.wq_a, &L.wq_b, &L.wq, &L.wk, &L.wv, &L.wkv_a_mqa, &L.wk_b, &L.wv_b, &L.wo, &L.gate_inp,
                            &L.ffn_up, &L.ffn_gate, &L.ffn_down, &L.up_shexp, &L.gate_shexp, &L.down_shexp})
      add(*t);
  }
  add(model.output());
  return out;
}

ExpertSlotShape expert_slot_shape(const Model& model) {
  const ModelConfig& c = model.config();
  ExpertSlotShape s;
  s.part_offset.resize(static_cast<size_t>(c.n_layer));
  s.part_bytes.resize(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (!c.is_moe_layer(il) || c.n_expert == 0) continue;
    const LayerWeights& L = model.layer(il);
    uint64_t at = 0;
    const Tensor* parts[] = {&L.gate_exps, &L.up_exps, &L.down_exps};
    for (int p = 0; p < 3; ++p) {
      const uint64_t bytes = static_cast<uint64_t>(parts[p]->ne[1]) * parts[p]->row_bytes;
      s.part_offset[static_cast<size_t>(il)][static_cast<size_t>(p)] = at;
      s.part_bytes[static_cast<size_t>(il)][static_cast<size_t>(p)] = bytes;
      at += vram_align(bytes);
    }
    s.slot_bytes = std::max(s.slot_bytes, at);
    s.routed_experts += static_cast<uint64_t>(c.n_expert);
  }
  return s;
}

VramPlan plan_vram(uint64_t budget, uint64_t workspace, const std::vector<ResidentMatrix>& resident,
                   const ExpertSlotShape& experts, const std::function<bool(GgmlType)>& supported) {
  VramPlan p;
  p.workspace = vram_align(workspace);
  if (budget < p.workspace)
    throw Error(ErrorCode::budget, "--vram " + human_bytes(budget) + " cannot hold the GPU workspace of " +
                                       human_bytes(p.workspace) + " (raise --vram or lower -b)");
  uint64_t left = budget - p.workspace;
  p.resident_offset.assign(resident.size(), -1);
  for (size_t i = 0; i < resident.size(); ++i) {
    const uint64_t need = vram_align(resident[i].bytes);
    if (!supported(resident[i].tensor->type) || need > left) {
      ++p.resident_on_cpu;
      p.resident_cpu_bytes += resident[i].bytes;
      continue;
    }
    p.resident_offset[i] = static_cast<int64_t>(p.resident_bytes);
    p.resident_bytes += need;
    left -= need;
    ++p.resident_on_gpu;
  }
  p.expert_slot_bytes = experts.slot_bytes;
  if (experts.slot_bytes > 0)
    p.expert_slots = static_cast<uint32_t>(std::min<uint64_t>({left / experts.slot_bytes, experts.routed_experts, UINT32_MAX}));
  return p;
}

}  // namespace sluice::core
