// ExpertPredictor: speculative gating. Predicts the experts of the next MoE layers from the
// current hidden state, so their reads can start while this layer computes.
//
// The residual stream changes slowly from one block to the next, so applying a later layer's
// router to an earlier hidden state is a good guess at its choice (the "pre-gating" idea). When
// MoE block `il` has routed (its demand reads are issued first), and once per forward pass from
// the token embeddings (il = -1, before block 0, so the first MoE layers' reads overlap the lead
// blocks' compute), for each of the next `depth` MoE blocks M:
//
//   h      = rms_norm(x, ffn_norm of M)        x: block il's ffn_inp rows [n][n_embd]
//   logits = gate_inp of M . h                 [n][n_expert]
//   ids    = route_token(M's routing params, logits, M's selection bias)   top-k per row
//
// and the union over the rows of each row's best max(1, k/4) ids (nearest layer first, best
// first) goes to ExpertSource::prefetch(M, ...): the lower-ranked predictions are right too
// rarely to pay for their reads (figures in expert_predictor.cpp). That is for small batches
// (decode, or a few sequences). A batch of kMinAheadRows or more (prefill) routes to most experts of every layer,
// more than a small cache holds, so each layer streams its experts through the cache; between
// two layers (this layer's last experts, the next one's attention) the disk would sit idle. For
// such a batch the next MoE layer's router is applied to kAheadRows rows spread over it, and the
// experts they pick, the most picked first, go to ExpertSource::read_ahead: the source reads
// them once this layer's own reads are all issued, into slots this layer no longer needs.
//
// Predictions never change results: they only decide what is read early. All scratch is sized
// in the constructor; predict() allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/experts/expert_source.h"
#include "core/experts/read_ahead.h"
#include "core/llama/model.h"
#include "core/llama/router.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

class ExpertPredictor {
 public:
  static constexpr int64_t kMaxRows = 4;        // batches up to this many rows are predicted
  static constexpr int64_t kMinAheadRows = kReadAheadMinRows;  // core/experts/read_ahead.h
  static constexpr int64_t kAheadRows = kReadAheadRows;

  // depth >= 1: how many MoE layers ahead to predict. Error(invalid_argument) for depth < 1.
  // n_threads: the pool size predict() will be called with (its matmul scratch holds a packed
  // tile per thread).
  ExpertPredictor(const Model& model, int depth, unsigned n_threads);

  // x: [n][n_embd] hidden state rows of block `il` (its ffn_inp), or the token embeddings for
  // il = -1. For n >= kMinAheadRows, a read-ahead of the next MoE layer (see above); nothing
  // for the batches in between.
  void predict(int64_t il, std::span<const float> x, int64_t n, ExpertSource& source, kernels::ThreadPool& pool);
  uint64_t scratch_bytes() const;
  // The same without constructing one (budget planning; equal to scratch_bytes()).
  static uint64_t scratch_bytes_for(const Model& model, unsigned n_threads);
  int depth() const { return depth_; }

 private:
  const Model& model_;
  int depth_;
  RouterParams params_;
  std::vector<float> h_, logits_, weights_, router_scratch_;
  std::vector<int32_t> ids_, groups_, list_;
  std::vector<uint32_t> counts_;  // read_ahead: picks per expert
  std::vector<uint8_t> seen_;
  std::vector<std::byte> mm_scratch_;

  struct Sizes;
  void read_ahead(int64_t il, std::span<const float> x, int64_t n, ExpertSource& source, kernels::ThreadPool& pool);
};

}  // namespace sluice::core
