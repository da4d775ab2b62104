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
//
// Sequence state export/import (run --prompt-cache, app/prompt_cache.h): save_state(n, sink)
// streams the state of sequence 0 after its first n tokens, load_state(n_saved, n_keep, source)
// reads such a stream back so that sequence 0 continues at position n_keep. The stream is the
// session's own memory, written and read in place (no copy, no buffer): no bytes outside the KV
// cache and recurrent state the budget already counts. Its layout, for SequenceStateShape:
//   fixed_bytes           the recurrent state (kimi-k3: every KDA layer's conv + delta-rule
//                         state, f32, as KimiK3State holds it); none for a KV-only session
//   per layer with a KV cache, in layer order:
//     K rows [0, n)       n x k_row bytes of the cache type (F16 or F32), as KvCache stores them
//     V rows [0, n)       n x v_row bytes (none where the cache has no V rows: MLA)
// so state_bytes(n) = fixed_bytes + n * bytes_per_token. A KV-only state loads any prefix
// n_keep <= n_saved (the rows past n_keep are read and dropped, and n_saved may exceed this
// session's context); a recurrent state is a carry at exactly n_saved tokens, so there n_keep
// must equal n_saved (can_rewind() false).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "common/ggml_type.h"
#include "common/release_pages.h"
#include "core/compute/matmul_offload.h"
#include "core/experts/cache_aware_routing.h"

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
  // MLA prefill attention (deepseek2 and kimi-k3 with an F16 cache;
  // core/compute/mla_decompressed_attention.h): a sequence with at least mla_decompress_tokens
  // tokens in a batch, attending at least mla_decompress_cells cells, decompresses its keys and
  // values per head (attn_k_b, attn_v_b) and attends them as multi-head attention: about 3x fewer
  // operations than the absorbed form on a long prompt, in another order than llama.cpp's (which
  // always absorbs). -1 cells: never. The
  // decompression costs 2 x kv_lora x 128 products per (cell, head) per batch: from about 256
  // tokens a batch saves more than that (768 products per query and cell).
  int64_t mla_decompress_cells = 1024;
  int64_t mla_decompress_tokens = 256;
  // Routing (core/experts/cache_aware_routing.h): exact (the default) or cache-aware, which
  // changes results wherever an expert it would route to is not in RAM.
  RoutePolicy route{};
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

// What a sequence's state stream holds (see the header comment): the cache type, the bytes that
// do not grow with the sequence, and the bytes each position adds.
struct SequenceStateShape {
  GgmlType kv_type = GgmlType::F16;
  uint64_t fixed_bytes = 0;
  uint64_t bytes_per_token = 0;
  bool operator==(const SequenceStateShape&) const = default;
  // fixed_bytes + n * bytes_per_token; Error(invalid_argument) on overflow.
  uint64_t bytes(int64_t n_tokens) const;
};

// Where save_state writes and load_state reads: called with spans of the session's own memory,
// in stream order. Errors are the implementation's (an Error aborts the save or load).
class StateSink {
 public:
  virtual ~StateSink() = default;
  virtual void write(std::span<const std::byte> bytes) = 0;
};
class StateSource {
 public:
  virtual ~StateSource() = default;
  virtual void read(std::span<std::byte> bytes) = 0;  // fills all of `bytes`
  virtual void skip(uint64_t n_bytes) = 0;             // reads past n_bytes of the stream
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
  // Returns the pages of the scratch that grows with n_batch (activations, matmul and attention
  // scratch: buffers every forward rewrites before it reads them) to the kernel
  // (common/release_pages.h); the next forward faults in only what it touches. Returns what it
  // released; nothing: this session cannot, and the engine lends nothing (core/engine.h, "Lending").
  virtual ReleasedPages release_batch_scratch() { return {}; }
  // Offers every weight product to `offload` first (null: all on the CPU; core/compute/
  // matmul_offload.h). Error(unsupported) where the architecture has no hook yet.
  virtual void set_matmul_offload(MatmulOffload* offload) = 0;

  // Sequence 0's state stream (see the header comment). save_state: Error(invalid_argument) for
  // n outside [1, n_ctx], or (recurrent state) n other than the tokens sequence 0 has evaluated.
  // load_state: Error(invalid_argument) for n_keep outside [1, min(n_saved, n_ctx)], or n_keep
  // != n_saved without can_rewind(); afterwards sequence 0 continues at position n_keep. A
  // source's error leaves sequence 0 to be restarted at position 0.
  virtual SequenceStateShape state_shape() const = 0;
  virtual void save_state(int64_t n_tokens, StateSink& sink) const = 0;
  virtual void load_state(int64_t n_saved, int64_t n_keep, StateSource& source) = 0;
};

// Error(invalid_argument) when a call asks for more logits rows than its session keeps.
void check_logit_rows(int64_t wanted, int64_t kept);

// The token-count checks every load_state shares (see Session).
void check_state_tokens(int64_t n_saved, int64_t n_keep, int64_t n_ctx, bool can_rewind);

}  // namespace sluice::core
