#include "core/gpu/vram_plan.h"

#include <algorithm>

#include "common/error.h"
#include "common/units.h"

namespace sluice::core {

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
