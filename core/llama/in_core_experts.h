// InCoreExpertSource: the ExpertSource (core/experts/expert_source.h) over a llama-family Model
// loaded with its routed experts.
#pragma once

#include "core/experts/expert_source.h"
#include "core/llama/model.h"

namespace sluice::core {

// The in-core source: views into a Model loaded with its routed experts.
class InCoreExpertSource final : public ExpertSource {
 public:
  explicit InCoreExpertSource(const Model& model);  // Error(invalid_argument) without experts
  ExpertWeights acquire(int layer, int expert) override;
  void release(int, int) override {}

 private:
  const Model& model_;
};

}  // namespace sluice::core
