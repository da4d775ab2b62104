// TraceRecorder: writes down the routing a session produces, as a routing trace
// (cache/trace.h, format in shared/traces/README.md), so `sluice tune` can replay a real run and
// `--profile-out` can turn it into an expert-use profile for `--warm`.
//
//   TraceRecorder rec("model.gguf");
//   rec.begin_sequence(config, n_ctx);      // one per request / generation
//   session.set_routing_observer(&rec);     // every routing decision, prefill and decode
//   ... forward passes ...
//   write_trace("run.trace", rec.trace());
//
// Each sequence holds the tokens in position order (token_idx = position - the sequence's first
// position), every MoE layer per token (layer = MoE layer index, dense lead blocks skipped),
// experts in the router's order. The header is
//   # model=<file stem> layers=<L> experts=<E> topk=<K> source=sluice:<model file>
// (spaces in names written %20). Storage for n_ctx tokens is reserved by begin_sequence, so
// recording allocates nothing per token unless a sequence outgrows its context.
#pragma once

#include <string>
#include <vector>

#include "cache/trace.h"
#include "core/arch/session.h"
#include "core/experts/streamed_experts.h"

namespace sluice::core {

class TraceRecorder final : public RoutingObserver {
 public:
  explicit TraceRecorder(std::string model_path);

  // Starts a new sequence. Every sequence must come from a model of the same shape:
  // Error(invalid_argument) otherwise, and for a model with no routed experts.
  void begin_sequence(const ExpertGeometry& geometry, int64_t n_ctx);
  template <class Config>
  void begin_sequence(const Config& config, int64_t n_ctx) {
    begin_sequence(ExpertGeometry::of(config), n_ctx);
  }
  void on_routing(const RoutingEvent& event) override;

  // The sequences so far. Error(internal) when a recorded token lacks a layer (a forward pass
  // that did not finish); a sequence with no tokens is left out.
  cache::Trace trace() const;
  size_t n_sequences() const { return sequences_.size(); }

 private:
  struct Sequence {
    int64_t first_pos = -1;
    int64_t n_token = 0;
    uint64_t events = 0;
    std::vector<uint32_t> experts;  // [n_token, n_layer, topk]
  };
  std::string model_path_;
  uint32_t n_layer_ = 0, n_expert_ = 0, topk_ = 0;
  std::vector<int> moe_of_block_;
  std::vector<Sequence> sequences_;
};

}  // namespace sluice::core
