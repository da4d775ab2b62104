// PartitionedExpertSource: an ExpertSource seen by one rank of an expert-parallel run
// (core/experts/expert_exchange.h). Demand (plan/acquire/release) passes through: the MoE layer
// already asks only for the experts this rank owns. Speculation (prefetch, read_ahead) is
// filtered to the owned experts, so each rank's router-guided prefetch and prefill read-ahead
// read only its share of the model, in the predictor's order.
#pragma once

#include <vector>

#include "core/experts/expert_exchange.h"
#include "core/experts/expert_source.h"

namespace sluice::core {

class PartitionedExpertSource final : public ExpertSource {
 public:
  // `n_expert`: experts per layer (the largest list prefetch can be given).
  PartitionedExpertSource(ExpertSource& inner, const ExpertPartition& partition, int64_t n_expert);

  void plan(int layer, std::span<const int32_t> experts) override { inner_.plan(layer, experts); }
  ExpertWeights acquire(int layer, int expert) override { return inner_.acquire(layer, expert); }
  void release(int layer, int expert) override { inner_.release(layer, expert); }
  int32_t acquire_any(int layer, std::span<const int32_t> remaining, ExpertWeights& out) override {
    return inner_.acquire_any(layer, remaining, out);
  }
  void prefetch(int layer, std::span<const int32_t> experts) override;
  void cached(int layer, std::span<uint8_t> out) const override { inner_.cached(layer, out); }
  void read_ahead(int layer, std::span<const int32_t> experts) override;

 private:
  std::span<const int32_t> owned(int layer, std::span<const int32_t> experts);

  ExpertSource& inner_;
  ExpertPartition partition_;
  std::vector<int32_t> kept_;  // n_expert, sized once
};

}  // namespace sluice::core
