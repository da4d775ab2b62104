// LayerSource: where the forward pass gets a block's non-routed weights from.
//
// A block's weights are a LayerWeights (core/llama/model.h): attention, norms, router, shared experts,
// dense FFN. In core they all sit in the Model; out of core (core/llama/streamed_layers.h) the tensors
// used as stored are streamed per block through a budgeted cache, and the output head
// (`output.weight`) is one more unit after the last block.
//
// Protocol, per forward() call: acquire(il) for il = 0 .. n_layer - 1 in order, each released
// before the next is acquired, then acquire_output() / release_output(). The order is known, so
// a streaming source reads the next unit while the current one computes (perfect prefetch).
// A view returned by acquire stays valid until the matching release.
#pragma once

#include <cstdint>

#include "core/llama/model.h"

namespace sluice::core {

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual const LayerWeights& acquire(int64_t block) = 0;
  virtual void release(int64_t block) = 0;
  virtual const Tensor& acquire_output() = 0;
  virtual void release_output() = 0;
};

// The in-core source: the Model's own tensors.
class ResidentLayers final : public LayerSource {
 public:
  explicit ResidentLayers(const Model& model) : model_(model) {}
  const LayerWeights& acquire(int64_t block) override { return model_.layer(block); }
  void release(int64_t) override {}
  const Tensor& acquire_output() override { return model_.output(); }
  void release_output() override {}

 private:
  const Model& model_;
};

// RAII over acquire/release of one block.
class LayerPin {
 public:
  LayerPin(LayerSource& source, int64_t block) : source_(source), block_(block), weights_(source.acquire(block)) {}
  ~LayerPin() { source_.release(block_); }
  LayerPin(const LayerPin&) = delete;
  LayerPin& operator=(const LayerPin&) = delete;
  const LayerWeights& weights() const { return weights_; }

 private:
  LayerSource& source_;
  int64_t block_;
  const LayerWeights& weights_;
};

}  // namespace sluice::core
