// ExpertSource: where the forward pass gets routed expert weights from.
//
// A routed expert of one MoE layer is three matrices (one "shard" in cache/ terms):
//   gate  [n_embd -> n_ff_exp]   WeightMatrix{n_cols = n_embd,   n_rows = n_ff_exp}
//   up    [n_embd -> n_ff_exp]   WeightMatrix{n_cols = n_embd,   n_rows = n_ff_exp}
//   down  [n_ff_exp -> n_embd]   WeightMatrix{n_cols = n_ff_exp, n_rows = n_embd}
// in the file's ggml type and row layout (the slice of blk.N.ffn_{gate,up,down}_exps.weight).
//
// Protocol, per MoE layer and forward() call (one batch of tokens):
//   1. plan(layer, experts): the distinct experts the batch routed to, ascending. A streaming
//      source starts reads for the ones it does not hold (a hint; it may ignore it).
//   2. acquire(layer, e) for each of them, in any order: blocks until e's weights are resident
//      and pins them; the views stay valid until release(layer, e). Or acquire_any(layer,
//      remaining): the source picks which of the remaining planned experts comes next; a
//      streaming source hands out resident ones first, then each as its read lands (completion
//      order), so compute runs while the other reads are in flight.
//   3. release(layer, e) once the expert's outputs for the batch are computed.
// At most one expert is pinned at a time by the forward pass today; a source must still allow
// several (a future forward pass may overlap compute with the next acquire).
//
// prefetch(layer, experts): a prediction, made before `layer` routes, of experts it will pick
// (core/llama/expert_predictor.h). A streaming source may start speculative reads; it never pins and
// never blocks on them. Demand (plan/acquire) always takes precedence.
//
// read_ahead(layer, experts): a large batch (prefill) guesses the next MoE layer's experts, the
// likeliest first, while this layer still runs. Where the next layer will stream (the guesses
// outnumber the slots it can have), a streaming source reads them once this layer's demand
// reads are all issued, into slots this layer no longer needs, so the disk keeps working through
// the rest of this layer and the next layer's attention. Like prefetch: never pins, never blocks.
//
// Results do not depend on the source: each (token, routing slot) output is kept separately and
// the slots are summed in routing order after all experts ran, so any source that returns the
// same bytes gives bit-identical logits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "kernels/matvec.h"

namespace sluice::core {

struct ExpertWeights {
  kernels::WeightMatrix gate;
  kernels::WeightMatrix up;
  kernels::WeightMatrix down;
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual void plan(int layer, std::span<const int32_t> experts) { (void)layer, (void)experts; }
  virtual ExpertWeights acquire(int layer, int expert) = 0;
  virtual void release(int layer, int expert) = 0;
  // Pins one of `remaining` (planned, not yet acquired; not empty) and returns it; the default
  // takes the first.
  virtual int32_t acquire_any(int layer, std::span<const int32_t> remaining, ExpertWeights& out) {
    out = acquire(layer, remaining.front());
    return remaining.front();
  }
  virtual void prefetch(int layer, std::span<const int32_t> experts) { (void)layer, (void)experts; }
  virtual void read_ahead(int layer, std::span<const int32_t> experts) { (void)layer, (void)experts; }
  // Which of the layer's experts are in RAM now, landed or being read (out[e] = 1; out has
  // n_expert entries), for cache-aware routing (core/experts/cache_aware_routing.h). The
  // default, for sources that hold everything: all of them.
  virtual void cached(int layer, std::span<uint8_t> out) const {
    (void)layer;
    std::fill(out.begin(), out.end(), uint8_t{1});
  }
};

// RAII pin over acquire/release.
class ExpertPin {
 public:
  ExpertPin(ExpertSource& source, int layer, int expert)
      : source_(source), layer_(layer), weights_(source.acquire(layer, expert)), expert_(expert) {}
  // acquire_any: the source chooses among `remaining`; expert() tells which.
  ExpertPin(ExpertSource& source, int layer, std::span<const int32_t> remaining)
      : source_(source), layer_(layer), expert_(source.acquire_any(layer, remaining, weights_)) {}
  ~ExpertPin() { source_.release(layer_, expert_); }
  ExpertPin(const ExpertPin&) = delete;
  ExpertPin& operator=(const ExpertPin&) = delete;
  const ExpertWeights& weights() const { return weights_; }
  int expert() const { return expert_; }

 private:
  ExpertSource& source_;
  int layer_;
  ExpertWeights weights_;  // before expert_: acquire_any fills it while expert_ is initialized
  int expert_;
};

}  // namespace sluice::core
