#include "core/llama/in_core_experts.h"

#include "common/error.h"

namespace sluice::core {

InCoreExpertSource::InCoreExpertSource(const Model& model) : model_(model) {
  if (!model.has_routed_experts())
    throw Error(ErrorCode::invalid_argument,
                "the model was loaded without its routed experts; an in-core expert source needs them");
}

ExpertWeights InCoreExpertSource::acquire(int layer, int expert) {
  const ModelConfig& c = model_.config();
  if (layer < 0 || layer >= c.n_layer || !c.is_moe_layer(layer) || expert < 0 || expert >= c.n_expert)
    throw Error(ErrorCode::internal, "no routed expert " + std::to_string(expert) + " in layer " +
                                         std::to_string(layer));
  const LayerWeights& L = model_.layer(layer);
  return {L.gate_exps.expert(expert), L.up_exps.expert(expert), L.down_exps.expert(expert)};
}

}  // namespace sluice::core
