// Session: what every architecture's forward pass offers the engine and the application layer.
//
// A session owns the per-sequence state (a KV cache, a recurrent state, or both) of up to
// n_seq() sequences of n_ctx() positions, and scratch for n_batch() tokens, all sized in its
// constructor: forward() and forward_batch() allocate nothing.
//
//   forward(tokens, start_pos)      one sequence (0): tokens at start_pos, start_pos + 1, ...;
//                                   logits rows for every token or only the last one
//   forward_batch(tokens, seqs,     continuous batching: token t of sequence seqs[t] at
//                 positions, want)  positions[t]; one logits row per token with want[t] != 0, in
//                                   batch order. Each sequence's logits equal a single-sequence
//                                   run of its tokens bit for bit.
//
// A sequence continues where it stopped or restarts at position 0. can_rewind() says whether it
// may also resume at any earlier position (a KV cache can; a recurrent state is a running carry
// and cannot, so callers re-evaluate from 0 instead).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "common/ggml_type.h"
#include "core/compute/matmul_offload.h"

namespace sluice::core {

class ExpertExchange;

// The logits rows a session keeps for n_logit_rows (0: the whole batch) at batch n_batch.
inline int64_t kept_logit_rows(int64_t n_logit_rows, int64_t n_batch) {
  return n_logit_rows > 0 ? std::min(n_logit_rows, n_batch) : n_batch;
}

struct SessionOptions {
  int64_t n_ctx = 0;                 // 0: min(training context, 4096)
  int64_t n_batch = 512;             // most tokens per forward() call
  GgmlType kv_type = GgmlType::F16;  // F16 or F32
  int64_t n_seq = 1;                 // sequences forward_batch can mix
  // Most logits rows one forward()/forward_batch() call returns; 0: n_batch. A row is n_vocab
  // floats for every batch slot (a 512-token batch of a 163,840-token vocabulary holds 335 MB), and
  // only perplexity and --logits-out read more than the last row of a prompt, so generation asks
  // for 1 (serve: one per sequence) and --budget gives the rest to the expert cache. A call that
  // would return more rows is an Error(invalid_argument).
  int64_t n_logit_rows = 0;
  int64_t logit_rows() const { return kept_logit_rows(n_logit_rows, n_batch); }
  // Speculative gating (core/llama/expert_predictor.h): predict the experts of this many following
  // MoE layers and hand them to ExpertSource::prefetch. 0: off. Never changes results. An
  // architecture without a predictor ignores it (Session::prefetch_depth() says 0).
  int prefetch_depth = 0;
  // Expert parallelism (core/experts/expert_exchange.h): this rank computes only the routed
  // experts the exchange's partition gives it and receives the others' outputs. Null: one
  // process computes every expert. Not owned; outlives the session.
  ExpertExchange* exchange = nullptr;
  // Prefill attention tiling (LlamaSession, F16 cache; core/llama/attention.cpp): query tokens of
  // one sequence per pass over the KV cells, and cells per pass (0: defaults sized for the L2).
  // Never changes results: 1 token per pass is the untiled order, which tests compare against.
  int64_t attn_tile_tokens = 0;
  int64_t attn_tile_cells = 0;
};

// One MoE routing decision: experts in selection order (descending score), their final mixing
// weights, and for group-limited routing the chosen groups.
struct RoutingEvent {
  int layer = 0;
  int64_t pos = 0;
  std::span<const int32_t> experts;
  std::span<const float> weights;
  std::span<const int32_t> groups;  // empty without group-limited routing
};

class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  virtual void on_routing(const RoutingEvent& event) = 0;
};

class Session {
 public:
  virtual ~Session() = default;
  // Error(invalid_argument): empty or more than n_batch tokens, a token outside the vocabulary,
  // positions past the context, a position the state cannot resume at, or more logits rows than
  // SessionOptions::logit_rows() (check_logit_rows).
  virtual std::span<const float> forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits = true) = 0;
  virtual std::span<const float> forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                               std::span<const int64_t> positions,
                                               std::span<const uint8_t> want_logits) = 0;
  virtual int64_t n_ctx() const = 0;
  virtual int64_t n_batch() const = 0;
  virtual int64_t n_seq() const = 0;
  virtual bool can_rewind() const = 0;
  // Whether forward() honours SessionOptions::exchange (computes only its rank's experts and
  // exchanges the rest). The engine refuses --expert-parallel for a session that does not.
  virtual bool expert_parallel() const { return false; }
  virtual void set_routing_observer(RoutingObserver* observer) = 0;
  virtual int prefetch_depth() const = 0;
  virtual uint64_t kv_bytes() const = 0;               // every sequence
  virtual uint64_t recurrent_state_bytes() const = 0;  // every sequence; 0 without one
  virtual uint64_t scratch_bytes() const = 0;
  // Offers every weight product to `offload` first (null: all on the CPU; core/compute/
  // matmul_offload.h). Error(unsupported) where the architecture has no hook yet.
  virtual void set_matmul_offload(MatmulOffload* offload) = 0;
};

// Error(invalid_argument) when a call asks for more logits rows than its session keeps.
void check_logit_rows(int64_t wanted, int64_t kept);

}  // namespace sluice::core
