// KimiK3Session: the `kimi-k3` forward pass over one sequence, as llama.cpp's CPU backend
// computes it (shared/specs/kimi-k3.md).
//
//   auto model = KimiK3Model::load(path, {.widen_f16_to_f32 = true});
//   KimiK3InCoreExperts experts(*model);
//   KimiK3Session s(*model, experts, pool, {.n_ctx = 128, .kv_type = GgmlType::F32});
//   auto logits = s.forward(prompt, 0);              // [n_prompt][n_vocab], one batch
//   auto next   = s.forward({&tok, 1}, n_prompt);     // [1][n_vocab]
//
// Per layer: residual mix (MIX over the banked checkpoints), RMS norm, then KDA (short conv,
// decay/beta gates, gated delta rule, per-head norm, sigmoid output gate) or absorbed MLA (no
// RoPE, latent MQA cache, sigmoid output gate); residual mix, RMS norm, then the dense situ FFN or
// the latent MoE (sigmoid router with selection bias, experts in latent space obtained through the
// ExpertSource, latent RMS norm and up projection, shared experts on the full width). A final
// residual mix precedes output_norm and the lm head.
//
// forward(tokens, start_pos) must continue the sequence: start_pos equals the number of tokens
// already evaluated (the KDA state is a running carry; it cannot rewind). start_pos == 0 starts
// a new sequence and resets the recurrent state. With n_seq > 1 the session holds one state per
// sequence and forward_batch() mixes their tokens (continuous batching); forward() is sequence 0.
//
// Numerics: every matmul goes through core::matmul (core/compute/matmul.h), which quantizes the
// activation rows to the weight's vec_dot_type as ggml does, and offers each product to the
// matmul offload first when one is set (`--gpu`: core/gpu/gpu_tier.h; the CPU computes what it
// declines); norms accumulate in double; the KDA recurrence, the
// conv, the attention softmax and all element-wise math are f32 in ggml's order. The MoE output
// sums the weighted expert outputs in routing order.
//
// Weights: each block's non-routed tensors come from a LayerSource (core/layers/layer_source.h),
// pinned for the block; the output head likewise. In core that is the model itself.
//
// Expert parallelism: with options.exchange the session computes only the routed experts its
// rank owns and exchanges the per-(token, slot) latent rows before the routing-order sum, so every
// rank's logits equal one process's bit for bit (core/experts/expert_exchange.h).
//
// Memory: the recurrent state and MLA cache (KimiK3State) and every activation buffer are sized in
// the constructor from the config, n_ctx and n_batch; forward() allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/arch/session.h"
#include "core/compute/matmul.h"
#include "core/compute/mla_decompressed_attention.h"
#include "core/experts/expert_source.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "core/layers/layer_source.h"
#include "core/kimi_k3/kimi_k3_predictor.h"
#include "core/kimi_k3/kimi_k3_state.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

struct KimiK3SessionOptions {
  int64_t n_ctx = 0;                 // 0: min(training context, 4096)
  int64_t n_batch = 512;             // most tokens per forward() call
  GgmlType kv_type = GgmlType::F16;  // MLA cache: F16 (llama.cpp's default) or F32
  bool chunked_kda = false;          // prefill KDA with the chunked form (same math, other rounding)
  int64_t n_seq = 1;                 // sequences (one recurrent state + MLA cache each)
  int prefetch_depth = 0;            // router-guided prefetch, MoE layers ahead (core/kimi_k3/kimi_k3_predictor.h)
  int64_t n_logit_rows = 0;          // most logits rows per call; 0: n_batch (SessionOptions::n_logit_rows)
  int64_t logit_rows() const { return kept_logit_rows(n_logit_rows, n_batch); }
  // Expert parallelism (core/experts/expert_exchange.h): compute only this rank's routed experts
  // and receive the others' latent rows. Null: every expert here. Not owned; outlives the session.
  ExpertExchange* exchange = nullptr;
  RoutePolicy route{};  // exact or cache-aware (core/experts/cache_aware_routing.h)
  // MLA's decompressed prefill form (SessionOptions::mla_decompress_*; an F16 cache only).
  int64_t mla_decompress_cells = 1024;
  int64_t mla_decompress_tokens = 256;
};

class KimiK3Session final : public Session {
 public:
  // `layers`: where block weights come from (null: the model's own, all resident). A model
  // loaded with stream_layer_tensors needs its StreamedLayers here; prefetch then is
  // Error(invalid_argument): the predictor reads later blocks' routers, which are not in RAM.
  KimiK3Session(const KimiK3Model& model, ExpertSource& experts, kernels::ThreadPool& pool,
                const KimiK3SessionOptions& options = {}, LayerSource<KimiK3Layer>* layers = nullptr);
  KimiK3Session(const KimiK3Session&) = delete;  // layers_ may point at resident_layers_
  KimiK3Session& operator=(const KimiK3Session&) = delete;

  // Error(invalid_argument): empty or more than n_batch tokens, a token id outside the vocabulary,
  // a start_pos that does not continue the sequence, or positions past the context.
  std::span<const float> forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits = true) override;
  // Tokens of several sequences (each continuing its own, or starting it at 0, in position
  // order). Each run of one sequence's tokens is computed as forward() computes that sequence
  // alone (its own state, the same products over the same rows), so every sequence's logits
  // equal a single-sequence run of its tokens bit for bit; experts shared by several runs are
  // read once and hit the cache for the others.
  std::span<const float> forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                       std::span<const int64_t> positions, std::span<const uint8_t> want_logits) override;

  void set_routing_observer(RoutingObserver* observer) override { observer_ = observer; }
  const KimiK3Config& config() const { return model_.config(); }
  int64_t n_ctx() const override { return states_[0].n_ctx(); }
  int64_t n_batch() const override { return n_batch_; }
  int64_t n_seq() const override { return static_cast<int64_t>(states_.size()); }
  bool can_rewind() const override { return false; }
  bool expert_parallel() const override { return true; }
  int prefetch_depth() const override { return predictor_ ? predictor_->depth() : 0; }
  // Offers every weight product to `offload` first (null: all products on the CPU).
  void set_matmul_offload(MatmulOffload* offload) override { offload_ = offload; }
  int64_t n_past(int64_t seq = 0) const { return n_past_[static_cast<size_t>(seq)]; }
  const KimiK3State& state(int64_t seq = 0) const { return states_[static_cast<size_t>(seq)]; }
  // Bytes of the recurrent state (KDA conv + delta-rule), of the MLA cache, of the scratch.
  // Every sequence.
  uint64_t recurrent_state_bytes() const override { return states_[0].recurrent_bytes() * states_.size(); }
  uint64_t kv_cache_bytes() const { return states_[0].kv_bytes() * states_.size(); }
  uint64_t kv_bytes() const override { return kv_cache_bytes(); }
  uint64_t scratch_bytes() const override;
  ReleasedPages release_batch_scratch() override;
  // Sequence 0's state (core/arch/session.h): the whole recurrent state (KimiK3State's f32 conv
  // and delta-rule floats, every KDA layer), then every MLA layer's cache rows [0, n). It is the
  // state after exactly n tokens: save_state needs n == n_past(), load_state n_keep == n_saved.
  // core/kimi_k3/kimi_k3_session_state.cpp.
  SequenceStateShape state_shape() const override;
  void save_state(int64_t n_tokens, StateSink& sink) const override;
  void load_state(int64_t n_saved, int64_t n_keep, StateSource& source) override;
  // scratch_bytes() of a session with these options, without allocating (core/kimi_k3/kimi_k3_session_size.cpp).
  static uint64_t scratch_bytes_for(const KimiK3Model& model, const KimiK3SessionOptions& options, unsigned threads);

 private:
  // forward() of sequence `seq`: its state, its position checks.
  std::span<const float> forward_seq(int64_t seq, std::span<const int32_t> tokens, int64_t start_pos, bool all_logits);
  void kda(int64_t il, int64_t n);
  void mla(int64_t il, int64_t n, int64_t start_pos);
  void mla_absorbed(int64_t il, int64_t n, int64_t start_pos);  // kimi_k3_mla.cpp: llama.cpp's form
  void output_gate_and_project(int64_t n);                     // mla_o_ -> a_
  void situ_ffn(const Tensor& gate, const Tensor& up, const Tensor& down, int64_t n_ff, int64_t n, float* out);
  void ffn_dense(int64_t il, int64_t n);
  void ffn_moe(int64_t il, int64_t n, int64_t start_pos);
  void shared_experts(int64_t n);
  void route(int64_t il, int64_t n, int64_t start_pos);
  // u = MIX(stack, cur, w) for n tokens; u may be cur.
  void mix(const Tensor& w, int64_t n, const float* cur, float* u);
  // core/compute/matmul.h, the dispatch every session shares: MatKind plain, permuted (MLA's
  // q_nope view), or ggml's vector path (mul_mat_id of the routed experts, and the KDA beta
  // product, which llama.cpp also runs there). Each run of a sequence is its own call.
  void matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y, MatKind kind = MatKind::plain);
  void rms_norm(const float* x, const Tensor& w, int64_t n_rows, int64_t len, float* y);

  const KimiK3Model& model_;
  ResidentLayers<KimiK3Layer> resident_layers_;
  LayerSource<KimiK3Layer>& layers_;
  const KimiK3Layer* layer_ = nullptr;  // the block forward_seq() is computing (pinned)
  ExpertSource& experts_;
  kernels::ThreadPool& pool_;
  MatmulOffload* offload_ = nullptr;
  int64_t n_batch_;
  int64_t logit_rows_;  // rows logits_ (and batch_logits_) hold (SessionOptions::logit_rows)
  bool chunked_kda_;
  std::vector<KimiK3State> states_;  // one per sequence
  KimiK3State* state_ = nullptr;     // the sequence forward_seq() is computing
  RoutingObserver* observer_ = nullptr;
  std::unique_ptr<KimiK3Predictor> predictor_;  // null: prefetch off
  std::vector<int64_t> n_past_;      // per sequence

  // Stream and sublayer buffers, [n_batch][n_embd].
  std::vector<float> x_, r_, u_, h_, a_;
  std::vector<std::byte> embd_row_;  // one token_embd row, when the table stays in the file
  std::vector<float> stack_;  // [n_checkpoints][n_batch][n_embd]
  int64_t n_stack_ = 0;
  std::vector<float> mix_probs_;
  std::vector<const float*> mix_rows_;
  // KDA, [n_batch][d_inner] unless noted.
  std::vector<float> proj_, conv_out_[3], fa_, z_, g_, beta_, o_, g2_, exp_g_, conv_win_, chunk_scratch_;
  // MLA.
  std::vector<float> qa_, q_, kv_, q_nope_, q_abs_, qh_, o_lat_, o_head_, mla_o_, gate_, scores_, kv_f32_, kv_col_;
  // MLA's decompressed prefill form (null: off for this session), the thresholds that take it,
  // and a batch's token rows and positions for it.
  static bool has_mla_form(const KimiK3Config& c, const KimiK3SessionOptions& o, int64_t n_ctx);
  std::unique_ptr<MlaDecompressedAttention> mla_form_;
  uint64_t mla_form_bytes_ = 0;
  int64_t mla_min_cells_ = 0, mla_min_tokens_ = 0;
  std::vector<int64_t> mla_rows_, mla_pos_;
  // FFN / MoE.
  std::vector<float> ffn_g_, ffn_u_, ffn_out_;
  std::vector<float> router_, probs_, sel_, route_w_, group_scores_;
  std::vector<int32_t> route_ids_, group_top_, expert_list_, pending_, gather_;
  std::vector<float> zl_, xe_, ge_, ue_, ye_, expert_out_, moe_, sh_;
  ExpertExchange* exchange_ = nullptr;   // expert parallelism; null: every expert here
  RoutePolicy route_policy_;              // KimiK3SessionOptions::route
  std::vector<uint8_t> route_cached_;     // cache-aware routing: the layer's experts in RAM
  std::vector<float> exchange_scratch_;  // [n_batch * n_expert_used][expert_width] with an exchange
  std::vector<float> logits_;
  std::vector<float> batch_logits_;  // n_seq > 1: forward_batch's rows, gathered per sequence
  std::vector<std::byte> mm_scratch_;
};

}  // namespace sluice::core
