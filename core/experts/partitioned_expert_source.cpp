#include "core/experts/partitioned_expert_source.h"

#include <algorithm>

namespace sluice::core {

PartitionedExpertSource::PartitionedExpertSource(ExpertSource& inner, const ExpertPartition& partition,
                                                 int64_t n_expert)
    : inner_(inner), partition_(partition), kept_(static_cast<size_t>(std::max<int64_t>(n_expert, 1))) {}

std::span<const int32_t> PartitionedExpertSource::owned(int layer, std::span<const int32_t> experts) {
  size_t n = 0;
  for (int32_t e : experts) {
    if (n == kept_.size()) break;  // a longer list than n_expert repeats experts; keep the first ones
    if (partition_.owns(layer, e)) kept_[n++] = e;
  }
  return {kept_.data(), n};
}

void PartitionedExpertSource::prefetch(int layer, std::span<const int32_t> experts) {
  const auto mine = owned(layer, experts);
  if (!mine.empty()) inner_.prefetch(layer, mine);
}

void PartitionedExpertSource::read_ahead(int layer, std::span<const int32_t> experts) {
  const auto mine = owned(layer, experts);
  if (!mine.empty()) inner_.read_ahead(layer, mine);
}

}  // namespace sluice::core
