#include "core/kimi_k3/kimi_k3_session.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/dot_f32.h"
#include "kernels/kda_chunked.h"
#include "kernels/matvec.h"
#include "kernels/quant.h"
#include "kernels/res_mix.h"
#include "kernels/rms_norm.h"

namespace sluice::core {

namespace {

int64_t default_ctx(const KimiK3Config& c, int64_t n_ctx) {
  return n_ctx > 0 ? n_ctx : std::min<int64_t>(c.n_ctx_train, 4096);
}

template <class T>
void size(std::vector<T>& v, int64_t n) {
  v.assign(static_cast<size_t>(std::max<int64_t>(n, 1)), T{});
}

}  // namespace

KimiK3Session::KimiK3Session(const KimiK3Model& model, ExpertSource& experts, kernels::ThreadPool& pool,
                             const KimiK3SessionOptions& options, LayerSource<KimiK3Layer>* layers)
    : model_(model),
      resident_layers_(model.layers(), model.output()),
      layers_(layers ? *layers : resident_layers_),
      experts_(experts),
      pool_(pool),
      n_batch_(options.n_batch),
      logit_rows_(options.logit_rows()),
      chunked_kda_(options.chunked_kda) {
  const KimiK3Config& c = model.config();
  if (n_batch_ <= 0) throw Error(ErrorCode::invalid_argument, "n_batch " + std::to_string(n_batch_) + " must be > 0");
  if (options.n_seq < 1) throw Error(ErrorCode::invalid_argument, "n_seq " + std::to_string(options.n_seq) + " must be > 0");
  states_.reserve(static_cast<size_t>(options.n_seq));
  for (int64_t s = 0; s < options.n_seq; ++s)
    states_.emplace_back(c, default_ctx(c, options.n_ctx), options.kv_type);
  state_ = &states_[0];
  n_past_.assign(states_.size(), 0);
  const int64_t B = n_batch_, E = c.n_embd, DI = c.d_inner(), H = c.n_head, D = c.kda_head_dim;
  for (auto* v : {&x_, &r_, &u_, &h_, &a_}) size(*v, B * E);
  embd_row_.resize(model.embeddings().staging_bytes());
  n_stack_ = 0;
  size(stack_, c.n_checkpoints() * B * E);
  size(mix_probs_, c.n_checkpoints() + 1);
  mix_rows_.assign(static_cast<size_t>(c.n_checkpoints() + 1), nullptr);
  if (c.n_kda_layers() > 0) {
    size(proj_, B * DI);
    for (auto& v : conv_out_) size(v, B * DI);
    for (auto* v : {&z_, &g_, &o_, &g2_, &exp_g_}) size(*v, B * DI);
    size(fa_, B * D);
    size(beta_, B * H);
    size(conv_win_, c.d_conv - 1 + B);
    if (chunked_kda_) size(chunk_scratch_, kernels::kda_chunked_scratch_floats(D, kernels::kKdaChunk, pool.size()));
  }
  if (c.n_mla_layers() > 0) {
    const int64_t R = c.mla_row(), dqk = c.qk_nope + c.qk_rope, n_ctx = state_->n_ctx();
    size(qa_, B * std::max<int64_t>(c.q_lora_rank, 1));
    size(q_, B * H * dqk);
    size(kv_, B * R);
    size(q_nope_, B * c.qk_nope);
    size(q_abs_, B * c.kv_lora_rank);
    size(qh_, B * H * R);
    size(o_lat_, B * c.kv_lora_rank);
    size(o_head_, B * c.v_head_dim);
    size(mla_o_, B * H * c.v_head_dim);
    size(gate_, B * H * c.v_head_dim);
    const int64_t n_pad = (n_ctx + 63) / 64 * 64;  // whole soft_max blocks and vector-dot steps
    size(scores_, n_pad);
    size(kv_col_, n_pad);
    if (options.kv_type != GgmlType::F32) size(kv_f32_, n_ctx * R);
    if (has_mla_form(c, options, n_ctx)) {
      const MlaShape shape{H, c.qk_nope, c.qk_rope, c.kv_lora_rank, c.v_head_dim, c.kq_scale};
      mla_form_ = std::make_unique<MlaDecompressedAttention>(shape, n_ctx, B, static_cast<int64_t>(pool.size()));
      mla_form_bytes_ = MlaDecompressedAttention::bytes(shape, n_ctx, B, static_cast<int64_t>(pool.size()));
      mla_rows_.resize(static_cast<size_t>(B));
      mla_pos_.resize(static_cast<size_t>(B));
    }
    mla_min_cells_ = options.mla_decompress_cells;
    mla_min_tokens_ = std::max<int64_t>(2, options.mla_decompress_tokens);
  }
  const int64_t ff = std::max({c.n_ff, c.n_ff_shexp, c.n_ff_exp});
  size(ffn_g_, B * ff);
  size(ffn_u_, B * ff);
  size(ffn_out_, B * E);
  if (c.n_layer_dense_lead < c.n_layer) {
    const int64_t L = c.expert_width(), k = c.n_expert_used;
    for (auto* v : {&router_, &probs_, &sel_}) size(*v, B * c.n_expert);
    size(route_w_, B * k);
    size(route_ids_, B * k);
    size(group_scores_, std::max<int64_t>(c.n_expert_groups, 1));
    size(group_top_, std::max<int64_t>(c.n_expert_groups, 1));
    size(expert_list_, c.n_expert);
    if (!options.route.exact()) route_cached_.resize(static_cast<size_t>(c.n_expert));
    size(pending_, c.n_expert);
    size(gather_, B * k);
    size(zl_, B * L);
    size(xe_, B * L);
    size(ge_, B * c.n_ff_exp);
    size(ue_, B * c.n_ff_exp);
    size(ye_, B * L);
    size(expert_out_, B * k * L);
    if (options.exchange) size(exchange_scratch_, B * k * L);
    size(moe_, B * L);
    size(sh_, B * E);
  }
  exchange_ = options.exchange;
  route_policy_ = options.route;
  size(logits_, options.logit_rows() * c.n_vocab);
  if (options.n_seq > 1) size(batch_logits_, options.logit_rows() * c.n_vocab);

  // Matmul scratch: the largest any weight needs for a full batch (in-memory type, or F32 when the
  // loader widened it).
  size_t mm = 0;
  for (const GgufTensorInfo& t : model.gguf().tensors()) {
    if (t.n_dims < 2) continue;
    mm = std::max(mm, kernels::matmul_scratch_bytes(t.type, t.ne[0], B, pool.size()));
    mm = std::max(mm, kernels::matmul_scratch_bytes(GgmlType::F32, t.ne[0], B, pool.size()));
  }
  size(mm_scratch_, static_cast<int64_t>(mm));
  if (!layers && !model.streamed().empty())
    throw Error(ErrorCode::invalid_argument, "this kimi-k3 model was loaded with its layers left out to stream; the "
                                             "session needs their LayerSource (KimiK3ArchModel::stream_layers)");
  if (options.prefetch_depth > 0 && c.n_expert > 0 && !model.streamed().empty())
    throw Error(ErrorCode::invalid_argument, "kimi-k3 prefetch needs every block's router in RAM; this model's layers "
                                             "stream (use prefetch depth 0)");
  if (options.prefetch_depth > 0 && c.n_expert > 0) predictor_ = std::make_unique<KimiK3Predictor>(model, options.prefetch_depth, pool.size());
  for (KimiK3State& st : states_) st.reset();
}

uint64_t KimiK3Session::scratch_bytes() const {
  uint64_t f = 0;
  for (const auto* v : {&x_, &r_, &u_, &h_, &a_, &stack_, &mix_probs_, &proj_, &conv_out_[0], &conv_out_[1],
                        &conv_out_[2], &fa_, &z_, &g_, &beta_, &o_, &g2_, &exp_g_, &conv_win_, &chunk_scratch_,
                        &qa_, &q_, &kv_, &q_nope_, &q_abs_, &qh_, &o_lat_, &o_head_, &mla_o_, &gate_, &scores_,
                        &kv_f32_, &kv_col_, &ffn_g_, &ffn_u_, &ffn_out_, &router_, &probs_, &sel_, &route_w_,
                        &group_scores_, &zl_, &xe_, &ge_, &ue_, &ye_, &expert_out_, &exchange_scratch_, &moe_, &sh_, &logits_,
                        &batch_logits_})
    f += v->size();
  uint64_t i = route_ids_.size() + group_top_.size() + expert_list_.size() + pending_.size() + gather_.size();
  return f * sizeof(float) + i * sizeof(int32_t) + route_cached_.size() + mm_scratch_.size() + mix_rows_.size() * sizeof(float*) +
         (predictor_ ? predictor_->scratch_bytes() : 0) + (mla_rows_.size() + mla_pos_.size()) * sizeof(int64_t) +
         mla_form_bytes_;
}

ReleasedPages KimiK3Session::release_batch_scratch() {
  ReleasedPages r;
  for (std::vector<float>* b : {&x_, &r_, &u_, &h_, &a_, &stack_, &proj_, &conv_out_[0], &conv_out_[1], &conv_out_[2],
                                &fa_, &z_, &g_, &beta_, &o_, &g2_, &exp_g_, &chunk_scratch_, &qa_, &q_, &kv_, &q_nope_,
                                &q_abs_, &qh_, &o_lat_, &o_head_, &mla_o_, &gate_, &scores_, &ffn_g_, &ffn_u_,
                                &ffn_out_, &router_, &probs_, &sel_, &route_w_, &zl_, &xe_, &ge_, &ue_, &ye_,
                                &expert_out_, &exchange_scratch_, &moe_, &sh_, &logits_, &batch_logits_})
    r.add(*b);
  r.add(route_ids_);
  r.add(gather_);
  r.add(mm_scratch_);
  if (mla_form_) r.add(mla_form_->release_scratch());
  return r;
}

bool KimiK3Session::has_mla_form(const KimiK3Config& c, const KimiK3SessionOptions& o, int64_t n_ctx) {
  return c.n_mla_layers() > 0 && o.kv_type == GgmlType::F16 &&
         std::max<int64_t>(o.n_batch, 1) >= std::max<int64_t>(2, o.mla_decompress_tokens) && o.mla_decompress_cells >= 0 &&
         o.mla_decompress_cells <= n_ctx;
}

void KimiK3Session::matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y, MatKind kind) {
  core::matmul(w, x, n, y, kind, mm_scratch_, pool_, offload_);
}

void KimiK3Session::rms_norm(const float* x, const Tensor& w, int64_t n_rows, int64_t len, float* y) {
  kernels::rms_norm({x, static_cast<size_t>(n_rows * len)}, w ? w.f32() : std::span<const float>{},
                    model_.config().rms_eps, len, {y, static_cast<size_t>(n_rows * len)});
}

void KimiK3Session::mix(const Tensor& w, int64_t n, const float* cur, float* u) {
  const int64_t E = model_.config().n_embd;
  if (n_stack_ == 0 || !w) {
    if (u != cur) std::memcpy(u, cur, static_cast<size_t>(n * E) * sizeof(float));
    return;
  }
  const size_t m = static_cast<size_t>(n_stack_ + 1);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < n_stack_; ++i) mix_rows_[static_cast<size_t>(i)] = stack_.data() + (i * n_batch_ + t) * E;
    mix_rows_[m - 1] = cur + t * E;
    kernels::res_mix({mix_rows_.data(), m}, w.f32(), model_.config().rms_eps, {mix_probs_.data(), m},
                     {u + t * E, static_cast<size_t>(E)});
  }
}

std::span<const float> KimiK3Session::forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits) {
  return forward_seq(0, tokens, start_pos, all_logits);
}

std::span<const float> KimiK3Session::forward_seq(int64_t seq, std::span<const int32_t> tokens, int64_t start_pos,
                                                  bool all_logits) {
  const KimiK3Config& c = model_.config();
  state_ = &states_[static_cast<size_t>(seq)];
  int64_t& n_past = n_past_[static_cast<size_t>(seq)];
  const int64_t n = static_cast<int64_t>(tokens.size()), E = c.n_embd;
  if (n == 0 || n > n_batch_)
    throw Error(ErrorCode::invalid_argument, "forward() got " + std::to_string(n) + " tokens; expected 1 to n_batch = " +
                                                 std::to_string(n_batch_));
  if (start_pos != 0 && start_pos != n_past)
    throw Error(ErrorCode::invalid_argument, "kimi-k3 forward() at position " + std::to_string(start_pos) +
                                                 " does not continue the sequence (next position " +
                                                 std::to_string(n_past) + "); the KDA state cannot rewind");
  if (start_pos + n > state_->n_ctx())
    throw Error(ErrorCode::invalid_argument, "positions up to " + std::to_string(start_pos + n - 1) +
                                                 " exceed the context of " + std::to_string(state_->n_ctx()));
  check_logit_rows(all_logits ? n : 1, logit_rows_);
  if (start_pos == 0) state_->reset();

  // x = token_embd[t] (rows dequantized as ggml_get_rows does).
  model_.embeddings().dequantize(tokens, embd_row_, x_.data());

  // The first MoE layers' experts, guessed from the embeddings, read while the lead blocks run.
  if (predictor_) predictor_->predict(-1, {x_.data(), static_cast<size_t>(n * E)}, n, experts_, pool_);
  const size_t bytes = static_cast<size_t>(n * E) * sizeof(float);
  n_stack_ = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    LayerPin<KimiK3Layer> pin(layers_, il);
    const KimiK3Layer& L = pin.weights();
    layer_ = &L;
    std::memcpy(r_.data(), x_.data(), bytes);
    mix(L.attn_res_score, n, r_.data(), u_.data());
    const bool banked = c.banks(il);
    if (banked) std::memcpy(stack_.data() + n_stack_++ * n_batch_ * E, r_.data(), bytes);
    rms_norm(u_.data(), L.attn_norm, n, E, h_.data());
    if (c.is_kda(il)) kda(il, n);
    else mla(il, n, start_pos);
    if (banked) std::memcpy(r_.data(), a_.data(), bytes);  // the stream restarts from the mixer output
    else
      for (int64_t i = 0; i < n * E; ++i) r_[static_cast<size_t>(i)] += a_[static_cast<size_t>(i)];
    mix(L.ffn_res_score, n, r_.data(), u_.data());
    rms_norm(u_.data(), L.ffn_norm, n, E, h_.data());
    if (c.is_moe_layer(il)) ffn_moe(il, n, start_pos);
    else ffn_dense(il, n);
    for (int64_t i = 0; i < n * E; ++i) x_[static_cast<size_t>(i)] = r_[static_cast<size_t>(i)] + ffn_out_[static_cast<size_t>(i)];
  }
  layer_ = nullptr;

  const int64_t first = all_logits ? 0 : n - 1, rows = n - first;
  mix(model_.output_res_score(), n, x_.data(), u_.data());
  rms_norm(u_.data() + first * E, model_.output_norm(), rows, E, h_.data());
  matmul(layers_.acquire_output().matrix(), h_.data(), rows, logits_.data());
  layers_.release_output();
  n_past = start_pos + n;
  return {logits_.data(), static_cast<size_t>(rows * c.n_vocab)};
}

std::span<const float> KimiK3Session::forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                                    std::span<const int64_t> positions,
                                                    std::span<const uint8_t> want_logits) {
  const size_t n = tokens.size();
  if (seqs.size() != n || positions.size() != n || want_logits.size() != n)
    throw Error(ErrorCode::invalid_argument, "forward_batch() spans differ in size");
  if (n == 0 || n > static_cast<size_t>(n_batch_))
    throw Error(ErrorCode::invalid_argument, "forward_batch() got " + std::to_string(n) +
                                                 " tokens; expected 1 to n_batch = " + std::to_string(n_batch_));
  const int64_t n_seq = static_cast<int64_t>(states_.size());
  for (size_t t = 0; t < n; ++t) {
    if (seqs[t] < 0 || seqs[t] >= n_seq)
      throw Error(ErrorCode::invalid_argument, "sequence " + std::to_string(seqs[t]) + " is outside [0, " +
                                                   std::to_string(n_seq) + ")");
  }
  check_logit_rows(std::count_if(want_logits.begin(), want_logits.end(), [](uint8_t w) { return w != 0; }), logit_rows_);
  // Rows land in logits_ (one sequence: compacted in place) or batch_logits_ (several).
  float* out = n_seq > 1 ? batch_logits_.data() : logits_.data();
  const size_t V = static_cast<size_t>(model_.config().n_vocab);
  size_t rows = 0;
  for (size_t begin = 0; begin < n;) {
    size_t end = begin + 1;  // a run: consecutive tokens of one sequence at consecutive positions
    while (end < n && seqs[end] == seqs[begin] && positions[end] == positions[end - 1] + 1) ++end;
    if (n_seq == 1 && begin > 0)  // its rows would land where the first run's are
      throw Error(ErrorCode::invalid_argument, "forward_batch(): one sequence's tokens must be at consecutive positions");
    size_t wanted = 0;
    for (size_t t = begin; t < end; ++t) wanted += want_logits[t] ? 1 : 0;
    // At most the run's last row wanted: the call a single run makes for its prompt.
    const bool all_rows = wanted > 1 || (wanted == 1 && !want_logits[end - 1]);
    const std::span<const float> got =
        forward_seq(seqs[begin], tokens.subspan(begin, end - begin), positions[begin], all_rows);
    for (size_t t = begin; t < end; ++t) {
      if (!want_logits[t]) continue;
      const float* row = got.data() + (all_rows ? (t - begin) * V : 0);
      if (out + rows * V != row) std::memmove(out + rows * V, row, V * sizeof(float));
      ++rows;
    }
    begin = end;
  }
  return {out, rows * V};
}

}  // namespace sluice::core
