// KimiK3Predictor: router-guided prefetch for kimi-k3 (speculative gating, as core/llama/
// expert_predictor.h does for the llama family).
//
// When MoE block `il` has routed (its demand reads planned first), for decode-sized batches
// (n <= kMaxRows) and each of the next `depth` MoE blocks M:
//
//   h      = rms_norm(u, ffn_norm of M)            u: block il's FFN input rows (the residual mix)
//   sel    = sigmoid(gate_inp of M . h) + M's selection bias        [n][n_expert]
//   ids    = the best max(1, k/4) experts of each row (k = n_expert_used; groups ignored)
//
// and the union goes to ExpertSource::prefetch(M, ...), nearest layer first. The residual stream
// moves slowly, so a later router applied to this hidden state is a fair guess; a wrong one
// costs a read, never a result: predictions only decide what is read early.
//
// A batch of kReadAheadMinRows rows or more (prefill) gets a read-ahead of the next MoE layer
// instead (core/experts/read_ahead.h, as the llama family's predictor does): that layer's router
// with its full top-k on read_ahead_rows(n) rows spread over the batch, the experts picked most
// often first, to ExpertSource::read_ahead. Also from the token embeddings (il = -1).
//
// All scratch is sized in the constructor; predict() allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/experts/expert_source.h"
#include "core/experts/read_ahead.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

class KimiK3Predictor {
 public:
  static constexpr int64_t kMaxRows = 4;  // batches up to this many rows are predicted
  // Rows the scratch holds: a prediction's, or a read-ahead's (core/experts/read_ahead.h).
  static constexpr int64_t kScratchRows = kReadAheadRows > kMaxRows ? kReadAheadRows : kMaxRows;

  // depth >= 1; Error(invalid_argument) otherwise. n_threads: the pool size predict() will be
  // called with (its matmul scratch holds a packed tile per thread).
  KimiK3Predictor(const KimiK3Model& model, int depth, unsigned n_threads);
  void predict(int64_t il, std::span<const float> u, int64_t n, ExpertSource& source, kernels::ThreadPool& pool);
  int depth() const { return depth_; }
  uint64_t scratch_bytes() const;
  static uint64_t scratch_bytes_for(const KimiK3Model& model, unsigned n_threads);

 private:
  const KimiK3Model& model_;
  int depth_;
  std::vector<float> h_, logits_, sel_;
  std::vector<int32_t> top_, ids_;
  std::vector<uint32_t> counts_;  // read_ahead: picks per expert
  std::vector<uint8_t> mark_;
  std::vector<std::byte> mm_scratch_;

  void read_ahead(int64_t il, std::span<const float> u, int64_t n, ExpertSource& source, kernels::ThreadPool& pool);
  // sel_ = sigmoid(gate_inp of L . rms_norm(rows, ffn_norm of L)) + selection bias, [n][n_expert].
  void select(const KimiK3Layer& L, std::span<const float> rows, int64_t n, kernels::ThreadPool& pool);
};

}  // namespace sluice::core
