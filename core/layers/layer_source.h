// LayerSource: where a forward pass gets a block's non-routed weights from, for any architecture.
//
// `Weights` is the architecture's per-block struct of core::Tensor views (llama's LayerWeights,
// kimi-k3's KimiK3Layer): attention, norms, router, shared experts, dense FFN. In core they all
// sit in the model; out of core (core/layers/streamed_layers.h) the tensors used as stored are
// streamed per block through a budgeted cache, and the output head (`output.weight`) is one more
// unit after the last block.
//
// Protocol, per forward pass: acquire(il) for il = 0 .. n_layer - 1 in order, each released
// before the next is acquired, then acquire_output() / release_output(). The order is known, so
// a streaming source reads the next unit while the current one computes (perfect prefetch).
// A view returned by acquire stays valid until the matching release.
#pragma once

#include <cstdint>
#include <span>

#include "core/gguf/gguf.h"
#include "core/gguf/tensor.h"

namespace sluice::core {

// A non-routed tensor a model left out of its load (stream_layer_tensors) for a streaming
// LayerSource (core/layers/streamed_layers.h) to supply.
template <class Weights>
struct StreamedTensorOf {
  int64_t block = 0;                  // transformer block; n_layer for the output head
  Tensor Weights::*member = nullptr;  // its field in Weights; null for the output head
  const GgufTensorInfo* info = nullptr;  // in the model's GgufFile
};

template <class Weights>
class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual const Weights& acquire(int64_t block) = 0;
  virtual void release(int64_t block) = 0;
  virtual const Tensor& acquire_output() = 0;
  virtual void release_output() = 0;
};

// The in-core source: the model's own tensors (`layers` and `output` outlive it).
template <class Weights>
class ResidentLayers final : public LayerSource<Weights> {
 public:
  ResidentLayers(std::span<const Weights> layers, const Tensor& output) : layers_(layers), output_(output) {}
  const Weights& acquire(int64_t block) override { return layers_[static_cast<size_t>(block)]; }
  void release(int64_t) override {}
  const Tensor& acquire_output() override { return output_; }
  void release_output() override {}

 private:
  std::span<const Weights> layers_;
  const Tensor& output_;
};

// RAII over acquire/release of one block.
template <class Weights>
class LayerPin {
 public:
  LayerPin(LayerSource<Weights>& source, int64_t block)
      : source_(source), block_(block), weights_(source.acquire(block)) {}
  ~LayerPin() { source_.release(block_); }
  LayerPin(const LayerPin&) = delete;
  LayerPin& operator=(const LayerPin&) = delete;
  const Weights& weights() const { return weights_; }

 private:
  LayerSource<Weights>& source_;
  int64_t block_;
  const Weights& weights_;
};

}  // namespace sluice::core
