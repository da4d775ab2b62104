// LlamaSession: runs a Model's forward pass over a KV cache, the way llama.cpp computes it.
//
//   LlamaSession s(model, experts, pool, {.n_ctx = 128, .kv_type = GgmlType::F32});
//   auto logits = s.forward(prompt_tokens, 0);        // [n_prompt][n_vocab], one batch
//   auto next   = s.forward({&tok, 1}, n_prompt);      // [1][n_vocab]
//
// forward(tokens, start_pos) evaluates tokens at positions start_pos, start_pos + 1, ... (at
// most n_batch tokens per call; the prompt is normally one call), stores their keys and values,
// and returns logits rows (all rows, or only the last one). Tokens attend causally to every
// position before them in the cache, so a caller may split a prompt into several calls and get
// the same numbers.
//
// Numerics follow llama.cpp's CPU graph on the reference build (x86, AVX-512, llamafile, REPACK):
//   - quantized weights: kernels::matmul quantizes activation rows to the vec_dot_type;
//   - F32/F16 weights (kernels/dot_f32.h): F16 rounds the activation, then products are summed
//     in ggml's exact order: llamafile's tinyBLAS order for a batch (>= 2 rows, n % 16 == 0,
//     plain mul_mat), ggml_vec_dot_f32's order for one token, permuted F32 inputs and experts
//     (mul_mat_id); so one-token calls and batches differ in the last bits, as in llama.cpp;
//   - attention runs over llama.cpp's padded KV cell count (multiple of 256, capped by n_ctx) with
//     masked cells at -inf; an F16 cache rounds q and the softmax weights to F16;
//   - softmax/silu use ggml's AVX-512 exp on full 16-lane blocks (emulated exactly), rope uses
//     the FMA contraction GCC applies to ggml's rotation;
//   - norms and routing sums accumulate in double as ggml does; the MoE output sums the weighted
//     expert outputs in routing order (llama.cpp's ffn_moe_out).
// Result: qwen3moe and llama-moe F32/F16 logits are bit-identical to llama.cpp's.
//
// Several sequences (continuous batching): with n_seq > 1 the session holds one KV cache per
// sequence, and forward_batch(tokens, seqs, positions) evaluates tokens of different sequences in
// one pass: every matmul (and the MoE's expert-major grouping) covers the whole batch, attention
// runs per token over its own sequence's cache. A token sees exactly what it would see in a
// single-sequence forward() of its sequence's tokens in this batch (same causal window, same
// padded KV cell count, and F32/F16 products (whose summation order depends on the row count,
// see above) run per run of same-sequence rows), so each sequence's logits equal a single-sequence
// run of its tokens bit for bit. Quantized products are row-independent and cover the batch.
//
// Memory: everything (KV cache, activations, router scratch, matmul scratch, per-thread attention
// scratch) is sized in the constructor from the config, n_ctx and n_batch. forward() allocates
// nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/arch/session.h"
#include "core/llama/expert_predictor.h"
#include "core/experts/expert_source.h"
#include "core/llama/kv_cache.h"
#include "io/aligned_buffer.h"
#include "core/compute/matmul.h"
#include "core/compute/matmul_offload.h"
#include "core/compute/mla_decompressed_attention.h"
#include "core/layers/layer_source.h"
#include "core/llama/model.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

class LlamaSession final : public Session {
 public:
  // `layers`: where block weights come from (null: the Model's own, all resident).
  LlamaSession(const Model& model, ExpertSource& experts, kernels::ThreadPool& pool,
          const SessionOptions& options = {}, LayerSource<LayerWeights>* layers = nullptr);
  // scratch_bytes() of a session with these options, computed without allocating (the budget is
  // checked before anything is allocated). `model` may be a Model::plan().
  LlamaSession(const LlamaSession&) = delete;  // layers_ may point at resident_layers_
  LlamaSession& operator=(const LlamaSession&) = delete;
  static uint64_t scratch_bytes_for(const Model& model, const SessionOptions& options, unsigned threads);
  // kv_bytes() of such a session (every sequence), without allocating.
  static uint64_t kv_bytes_for(const ModelConfig& config, const SessionOptions& options);

  // Error(invalid_argument): empty or more than n_batch tokens, a token id outside the
  // vocabulary, or positions past the context.
  std::span<const float> forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits = true) override;
  // Tokens of several sequences in one pass: token t belongs to sequence seqs[t] at position
  // positions[t]; a sequence's tokens must be in ascending position order and its earlier
  // positions already evaluated. Returns one logits row per token whose want_logits[t] is
  // non-zero, in batch order. Error(invalid_argument) as forward(), plus a sequence outside
  // [0, n_seq) or mismatched span sizes.
  std::span<const float> forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                       std::span<const int64_t> positions, std::span<const uint8_t> want_logits) override;

  void set_routing_observer(RoutingObserver* observer) override { observer_ = observer; }
  // Offers every weight product to `offload` first (null: all products on the CPU).
  void set_matmul_offload(MatmulOffload* offload) override { offload_ = offload; }
  const ModelConfig& config() const { return model_.config(); }
  int64_t n_ctx() const override { return kv_[0].n_ctx(); }
  int64_t n_seq() const override { return static_cast<int64_t>(kv_.size()); }
  int64_t n_batch() const override { return n_batch_; }
  const KvCache& kv_cache(int64_t seq = 0) const { return kv_[static_cast<size_t>(seq)]; }
  bool can_rewind() const override { return true; }
  bool expert_parallel() const override { return true; }
  uint64_t recurrent_state_bytes() const override { return 0; }
  uint64_t kv_bytes() const override { return kv_[0].bytes() * kv_.size(); }  // all sequences
  int prefetch_depth() const override { return predictor_ ? predictor_->depth() : 0; }
  uint64_t scratch_bytes() const override { return scratch_bytes_; }
  ReleasedPages release_batch_scratch() override;
  // Sequence 0's KV rows, every layer's K then V rows [0, n) (core/arch/session.h); no fixed part.
  // core/llama/session_state.cpp.
  SequenceStateShape state_shape() const override;
  void save_state(int64_t n_tokens, StateSink& sink) const override;
  void load_state(int64_t n_saved, int64_t n_keep, StateSource& source) override;

 private:
  // Checks the batch, embeds it and runs every layer; pos_/seq_/seq_used_/seq_count_ are set.
  void run_layers(std::span<const int32_t> tokens);
  void attention_gqa(int64_t il, int64_t n);
  void attention_mla(int64_t il, int64_t n);
  // MLA prefill in the decompressed form (attention_mla_decompressed.cpp): whether sequence s of
  // the current batch takes it, and the attention of those sequences' tokens into heads_out_.
  bool mla_decompresses(size_t s) const;
  void attention_mla_decompressed(int64_t il, int64_t n);
  // f(begin, end) over rows [0, n): split over the pool for a batch, inline for a few rows. For the
  // element-wise passes between products (gathers, residual adds, norms), which run on this thread
  // alone while the pool idles; each row is computed the same way wherever it runs.
  template <class F>
  void for_rows(int64_t n, F&& f) {
    if (n >= kPoolRowsMin) pool_.parallel_for(n, kPoolRowsMin / 4, [&](int64_t b, int64_t e) { f(b, e); });
    else f(int64_t{0}, n);
  }
  static constexpr int64_t kPoolRowsMin = 16;
  bool all_heads_at_once(const Tensor& t) const;  // attention.cpp
  // Attends every (token, head) of the batch; q rows of `q_stride` floats, heads `q_head_stride`
  // apart; writes `v_len` floats per head to out (heads `out_head_stride` apart). An F16 cache is
  // read a tile of cells at a time for a tile of query rows (several tokens of one sequence x a
  // head block), so a prefill reads the layer's cache once per tile instead of once per token.
  // The scores, the softmax and each output's sum over the cells are computed exactly as one
  // token at a time would: every output is bit-identical for any tiling. Sequences marked in
  // mla_decompressed_ are skipped (attention_mla_decompressed attends them).
  void attend(int64_t il, int64_t n, const float* q, int64_t q_stride, int64_t q_head_stride,
              int64_t k_len, int64_t v_len, float* out, int64_t out_stride, int64_t out_head_stride);
  void ffn_dense(const Tensor& gate, const Tensor& up, const Tensor& down, int64_t n, float* out);
  void ffn_moe(int64_t il, int64_t n, float* out);
  void route(int64_t il, int64_t n);
  // The runs (by sequence) of the m rows gather_ holds for one expert of an n-token batch; empty
  // for a batch of one sequence. moe.cpp.
  std::span<const int64_t> expert_runs(int64_t n, int64_t m);
  // core/compute/matmul.h (the one dispatch; MatKind says how ggml meets the product: plain,
  // permuted, or its vector path for mul_mat_id) with this session's scratch, pool, offload and,
  // for the current activation, its sequence runs.
  void matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y, MatKind kind = MatKind::plain);

  struct Sizes;
  const Model& model_;
  ExpertSource& experts_;
  ResidentLayers<LayerWeights> resident_layers_;
  LayerSource<LayerWeights>& layers_;
  const LayerWeights* layer_ = nullptr;  // the block forward() is computing
  uint64_t scratch_bytes_ = 0;
  kernels::ThreadPool& pool_;
  int64_t n_batch_;
  int64_t logit_rows_;  // rows logits_ holds (SessionOptions::logit_rows)
  std::vector<KvCache> kv_;  // one per sequence
  // Per token of the current batch: position and sequence; per sequence: the cells the batch
  // fills up to (its largest position + 1) and its token count.
  std::vector<int64_t> pos_;
  std::vector<int32_t> seq_;
  std::vector<int64_t> seq_used_, seq_count_;
  // Boundaries of the runs of consecutive same-sequence rows in the activation being multiplied
  // (runs_n_ rows). ggml's F32/F16 products sum in an order that depends on the row count, so
  // with several sequences in a batch they run per run: each sequence gets its own numbers.
  std::vector<int64_t> runs_;
  int64_t runs_n_ = 0;
  // The same for one expert's gathered rows (ffn_moe), where the IQ panel's order depends on how
  // many rows each sequence routes to the expert.
  std::vector<int64_t> expert_runs_;
  RoutingObserver* observer_ = nullptr;
  MatmulOffload* offload_ = nullptr;
  std::unique_ptr<ExpertPredictor> predictor_;  // null: prefetch off
  ExpertExchange* exchange_ = nullptr;          // expert parallelism; null: every expert here
  RoutePolicy route_policy_;                    // SessionOptions::route
  std::vector<float> exchange_scratch_;         // [n_batch * n_expert_used][n_embd] with an exchange

  // Activations, [n_batch][...] row-major.
  std::vector<float> x_, cur_, attn_out_, ffn_out_;
  std::vector<std::byte> embd_row_;  // one token_embd row, when the table stays in the file
  std::vector<float> q_, k_, v_, qa_, kva_, qcur_, kqv_, heads_out_, head_in_, head_res_;
  std::vector<float> ffn_g_, ffn_u_, sh_out_;
  std::vector<float> router_logits_, router_scratch_, route_w_, expert_out_;
  std::vector<uint8_t> route_cached_;  // cache-aware routing: the layer's experts in RAM
  std::vector<int32_t> route_ids_, route_groups_, expert_list_, pending_, gather_;
  std::vector<float> xe_, ge_, ue_, de_;
  std::vector<float> rope_cache_;
  std::vector<float> logits_;
  std::vector<std::byte> mm_scratch_;
  // Per attention slot (one per thread): scores and quantized q for a tile of query rows
  // (attn_tile_tokens_ tokens x kAttnHeadBlock heads), rounded softmax, value column (F32 cache).
  // The score rows are n_ctx floats each: the scratch is linear in the context.
  static constexpr int64_t kAttnHeadBlock = 4;
  static constexpr int64_t kAttnMaxTileTokens = 16;
  int64_t n_slots_ = 1;
  size_t slot_bytes_ = 0;
  io::AlignedBuffer slots_;  // page-aligned: the SIMD kernels' full-vector loads of scratch rows
  int64_t attn_tile_tokens_ = 1;  // query tokens of one sequence per pass over the cells
  int64_t attn_tile_cells_ = 0;   // KV cells per pass (0: from the row size, attention.cpp)
  std::vector<int64_t> attn_tiles_;  // the current batch's tiles: first token of each, then n
  // MLA prefill, decompressed form (SessionOptions::mla_decompress_*): per sequence of the batch,
  // whether it takes that form; the form's scratch (null: off for this session); the batch's
  // tokens of one sequence.
  std::vector<uint8_t> mla_decompressed_;
  std::unique_ptr<MlaDecompressedAttention> mla_form_;
  int64_t mla_min_cells_ = 0, mla_min_tokens_ = 0;
  std::vector<int64_t> mla_tokens_;
};

}  // namespace sluice::core
