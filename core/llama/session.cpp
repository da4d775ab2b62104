#include "core/llama/session.h"

#include <algorithm>

#include "common/error.h"
#include "common/release_pages.h"
#include "kernels/activations.h"
#include "kernels/dot_f32.h"
#include "kernels/quant.h"
#include "kernels/rms_norm.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
size_t sz(int64_t n) { return static_cast<size_t>(std::max<int64_t>(n, 0)); }
MlaShape mla_shape(const ModelConfig& c) {
  return {c.n_head, c.qk_nope, c.qk_rope, c.kv_lora_rank, c.v_head_dim, c.kq_scale};
}

int64_t default_ctx(const ModelConfig& c, int64_t n_ctx) {
  if (n_ctx > 0) return n_ctx;
  return std::min<int64_t>(c.n_ctx_train, 4096);
}

}  // namespace

// Every buffer's element count, from the config, the weights' shapes and the batch; the
// constructor allocates exactly this and scratch_bytes_for() sums it without allocating.
struct LlamaSession::Sizes {
  size_t x = 0, cur = 0, attn_out = 0, ffn_out = 0, q = 0, k = 0, v = 0, qa = 0, kva = 0, qcur = 0, kqv = 0,
         heads_out = 0, head_in = 0, head_res = 0, ffn_g = 0, ffn_u = 0, sh_out = 0, router_logits = 0,
         router_scratch = 0, route_w = 0, expert_out = 0, xe = 0, ge = 0, ue = 0, de = 0, rope_cache = 0,
         logits = 0, exchange = 0;  // floats
  size_t route_ids = 0, route_groups = 0, expert_list = 0, gather = 0;   // int32 (pending_: expert_list)
  size_t route_cached = 0;                                              // bytes (cache-aware routing)
  size_t mm_scratch = 0, slots = 0, slot_bytes = 0, predictor = 0, mla_form = 0, mla_tokens = 0;  // bytes
  size_t pos = 0, seqs = 0;  // per token: pos_ (int64) + seq_ (int32) + runs_ and attn_tiles_ (int64, +1 each); per sequence: 2 int64
  int64_t n_slots = 1, attn_tile_tokens = 1, attn_tile_cells = 0;
  bool mla = false;  // the decompressed MLA form is on

  uint64_t bytes() const {
    uint64_t f = x + cur + attn_out + ffn_out + q + k + v + qa + kva + qcur + kqv + heads_out + head_in + head_res +
                 ffn_g + ffn_u + sh_out + router_logits + router_scratch + route_w + expert_out + xe + ge + ue + de +
                 rope_cache + logits + exchange;
    return 4 * (f + route_ids + route_groups + 2 * expert_list + gather) + route_cached + mm_scratch + slots + predictor +
           mla_form + mla_tokens + 8 * pos + 4 * pos + 2 * 8 * (pos + 1) + 17 * seqs;
  }

  static Sizes of(const Model& model, const SessionOptions& o, int64_t n_threads) {
    const ModelConfig& c = model.config();
    const auto threads = static_cast<unsigned>(std::max<int64_t>(1, n_threads));
    Sizes z;
    if (o.n_batch <= 0)
      throw Error(ErrorCode::invalid_argument, "batch size " + std::to_string(o.n_batch) + " must be positive");
    if (o.prefetch_depth < 0)
      throw Error(ErrorCode::invalid_argument, "--prefetch-depth " + std::to_string(o.prefetch_depth) + " must be 0 or more");
    check_route_policy(o.route, c.n_expert_used);
    if (o.attn_tile_tokens < 0 || o.attn_tile_tokens > kAttnMaxTileTokens || o.attn_tile_cells < 0)
      throw Error(ErrorCode::invalid_argument, "attention tile of " + std::to_string(o.attn_tile_tokens) + " tokens x " +
                                                   std::to_string(o.attn_tile_cells) + " cells: tokens must be in [0, " +
                                                   std::to_string(kAttnMaxTileTokens) + "], cells 0 or more");
    if (o.n_seq <= 0 || o.n_seq > 4096)
      throw Error(ErrorCode::invalid_argument, "sequence count " + std::to_string(o.n_seq) + " must be in [1, 4096]");
    const int64_t B = o.n_batch, E = c.n_embd;
    z.pos = sz(B);
    z.seqs = sz(o.n_seq);
    z.x = z.cur = z.attn_out = z.ffn_out = sz(B * E);
    int64_t k_len = 0, v_len = 0;  // the attention slot's quantized q row and value sums
    if (c.is_mla()) {
      const int64_t N = c.qk_nope, R = c.qk_rope, L = c.kv_lora_rank, V = c.v_head_dim, H = c.n_head;
      z.qa = sz(B * c.q_lora_rank);
      z.q = sz(B * H * (N + R));
      z.kva = sz(B * (L + R));
      z.qcur = sz(B * H * (R + L));
      z.kqv = sz(std::max(B * H * L, R + L));
      z.heads_out = sz(B * H * V);
      z.head_in = sz(B * std::max(N, L));
      z.head_res = sz(B * std::max(L, V));
      k_len = R + L;
      v_len = L;
    } else {
      z.q = sz(B * c.n_head * c.head_dim_k);
      z.k = sz(B * c.n_head_kv * c.head_dim_k);
      z.v = sz(B * c.n_head_kv * c.head_dim_v);
      z.heads_out = sz(B * c.n_head * c.head_dim_v);
      k_len = c.head_dim_k;
      v_len = c.head_dim_v;
    }
    z.rope_cache = sz(c.rope.n_dims);
    int64_t ff = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) {
      if (!c.is_moe_layer(il)) ff = std::max(ff, c.n_ff);
    }
    ff = std::max({ff, c.n_ff_shexp});
    z.ffn_g = z.ffn_u = sz(B * ff);
    if (c.n_expert > 0) {
      const int64_t X = c.n_expert, K = c.n_expert_used, G = c.n_expert_groups;
      z.router_logits = sz(B * X);
      z.router_scratch = sz(2 * X + 2 * G);
      z.route_ids = z.route_w = sz(B * K);
      z.route_groups = sz(B * c.n_group_used);
      if (!o.route.exact()) z.route_cached = sz(X);
      z.expert_out = sz(B * K * E);
      if (o.exchange) z.exchange = z.expert_out;
      z.expert_list = sz(X);
      z.gather = sz(B * K);
      z.xe = z.de = z.sh_out = sz(B * E);
      z.ge = z.ue = sz(B * c.n_ff_exp);
      if (o.prefetch_depth > 0) z.predictor = ExpertPredictor::scratch_bytes_for(model, threads);
    }
    z.logits = sz(o.logit_rows() * c.n_vocab);

    size_t mm = 0;
    auto need = [&](const Tensor& t) {
      if (t.ne[0] > 0 && (t.data || t.row_bytes)) {
        mm = std::max(mm, kernels::matmul_scratch_bytes(t.type, t.ne[0], B, threads));
        if (t.type == GgmlType::F16) mm = std::max(mm, sz(t.ne[0] * B) * 4);
      }
    };
    need(model.output());
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const LayerWeights& L = model.layer(il);
      for (const Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wq_a, &L.wq_b, &L.wkv_a_mqa, &L.wk_b, &L.wv_b,
                              &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.gate_inp, &L.gate_exps, &L.up_exps,
                              &L.down_exps, &L.gate_shexp, &L.up_shexp, &L.down_shexp})
        need(*t);
      // MLA's per-head products of one token in one pass (attention.cpp): every head's activation.
      for (const Tensor* t : {&L.wk_b, &L.wv_b})
        if (t->ne[0] > 0 && (t->data || t->row_bytes))
          mm = std::max(mm, kernels::matvec_slices_scratch_bytes(t->type, t->ne[0], t->ne[2]));
    }
    z.mm_scratch = std::max<size_t>(mm, kAlign);

    z.n_slots = std::max<int64_t>(1, n_threads);
    const int64_t n_ctx = default_ctx(c, o.n_ctx);
    const GgmlType qt = kernels::vec_dot_type(o.kv_type);
    // An F32 cache attends one token at a time (its V^T kq dots, ggml's order, run per channel);
    // an F16 one a tile of tokens, never more than a batch holds.
    const int64_t tile = o.attn_tile_tokens > 0 ? o.attn_tile_tokens : kAttnMaxTileTokens;
    z.attn_tile_tokens = o.kv_type == GgmlType::F32 ? 1 : std::min(tile, B);
    z.attn_tile_cells = o.attn_tile_cells;
    const size_t rows = sz(z.attn_tile_tokens * kAttnHeadBlock);
    z.slot_bytes = rows * align_up(sz(n_ctx) * 4) + align_up(sz(n_ctx) * 2) +
                   rows * align_up(ggml_row_bytes(qt, static_cast<uint64_t>(k_len))) + align_up(sz(n_ctx) * 4);
    // An F16 cache's batched value sums in tinyBLAS's order: 16 lanes of a value row per query row.
    // (Only a batch of >= 2 tokens takes that order: a session of batch 1 never needs them.)
    if (o.kv_type != GgmlType::F32 && B >= 2)
      z.slot_bytes += rows * align_up(sz(16 * v_len) * 4) +
                      align_up(kernels::fma_f16_rows_scratch_floats(v_len, static_cast<int64_t>(rows), n_ctx + 16) * 4);
    z.slots = z.slot_bytes * sz(z.n_slots);
    // MLA's decompressed prefill form (core/compute/mla_decompressed_attention.h).
    if (c.is_mla() && o.kv_type == GgmlType::F16 && B >= std::max<int64_t>(2, o.mla_decompress_tokens) &&
        o.mla_decompress_cells >= 0 && o.mla_decompress_cells <= n_ctx) {
      z.mla = true;
      z.mla_form = MlaDecompressedAttention::bytes(mla_shape(c), n_ctx, B, z.n_slots);
      z.mla_tokens = sz(B) * 8;
    }
    return z;
  }
};

LlamaSession::LlamaSession(const Model& model, ExpertSource& experts, kernels::ThreadPool& pool, const SessionOptions& o,
                 LayerSource<LayerWeights>* layers)
    : model_(model),
      experts_(experts),
      resident_layers_(model.layers(), model.output()),
      layers_(layers ? *layers : resident_layers_),
      pool_(pool),
      n_batch_(o.n_batch),
      logit_rows_(o.logit_rows()) {
  const Sizes z = Sizes::of(model, o, static_cast<int64_t>(pool.size()));
  const ModelConfig& c = model.config();
  kv_.reserve(sz(o.n_seq));
  for (int64_t s = 0; s < o.n_seq; ++s) kv_.emplace_back(c, o.kv_type, default_ctx(c, o.n_ctx));
  pos_.resize(z.pos);
  seq_.resize(z.pos);
  runs_.reserve(z.pos + 1);
  expert_runs_.reserve(z.pos + 1);
  seq_used_.resize(z.seqs);
  seq_count_.resize(z.seqs);
  x_.resize(z.x);
  embd_row_.resize(model.embeddings().staging_bytes());
  cur_.resize(z.cur);
  attn_out_.resize(z.attn_out);
  ffn_out_.resize(z.ffn_out);
  q_.resize(z.q);
  k_.resize(z.k);
  v_.resize(z.v);
  qa_.resize(z.qa);
  kva_.resize(z.kva);
  qcur_.resize(z.qcur);
  kqv_.resize(z.kqv);
  heads_out_.resize(z.heads_out);
  head_in_.resize(z.head_in);
  head_res_.resize(z.head_res);
  ffn_g_.resize(z.ffn_g);
  ffn_u_.resize(z.ffn_u);
  sh_out_.resize(z.sh_out);
  router_logits_.resize(z.router_logits);
  router_scratch_.resize(z.router_scratch);
  route_w_.resize(z.route_w);
  expert_out_.resize(z.expert_out);
  exchange_scratch_.resize(z.exchange);
  exchange_ = o.exchange;
  route_policy_ = o.route;
  xe_.resize(z.xe);
  ge_.resize(z.ge);
  ue_.resize(z.ue);
  de_.resize(z.de);
  rope_cache_.resize(z.rope_cache);
  logits_.resize(z.logits);
  route_ids_.resize(z.route_ids);
  route_groups_.resize(z.route_groups);
  route_cached_.resize(z.route_cached);
  expert_list_.resize(z.expert_list);
  pending_.resize(z.expert_list);
  gather_.resize(z.gather);
  mm_scratch_.resize(z.mm_scratch);
  n_slots_ = z.n_slots;
  slot_bytes_ = z.slot_bytes;
  slots_ = io::AlignedBuffer(z.slots);
  attn_tile_tokens_ = z.attn_tile_tokens;
  attn_tile_cells_ = z.attn_tile_cells;
  attn_tiles_.resize(z.pos + 1);
  mla_decompressed_.resize(z.seqs);
  if (z.mla)
    mla_form_ = std::make_unique<MlaDecompressedAttention>(mla_shape(c), default_ctx(c, o.n_ctx), o.n_batch, z.n_slots);
  mla_min_cells_ = o.mla_decompress_cells;
  mla_min_tokens_ = std::max<int64_t>(2, o.mla_decompress_tokens);
  mla_tokens_.resize(z.mla_tokens / 8);
  if (o.prefetch_depth > 0 && model.config().n_expert > 0) predictor_ = std::make_unique<ExpertPredictor>(model, o.prefetch_depth, pool.size());
  scratch_bytes_ = z.bytes();
}

ReleasedPages LlamaSession::release_batch_scratch() {
  ReleasedPages r;
  for (std::vector<float>* b : {&x_, &cur_, &attn_out_, &ffn_out_, &q_, &k_, &v_, &qa_, &kva_, &qcur_, &kqv_,
                                &heads_out_, &head_in_, &head_res_, &ffn_g_, &ffn_u_, &sh_out_, &router_logits_,
                                &route_w_, &expert_out_, &exchange_scratch_, &xe_, &ge_, &ue_, &de_, &logits_})
    r.add(*b);
  r.add(route_ids_);
  r.add(gather_);
  r.add(mm_scratch_);
  r.add(slots_.data(), slots_.size());
  if (mla_form_) r.add(mla_form_->release_scratch());
  return r;
}

uint64_t LlamaSession::scratch_bytes_for(const Model& model, const SessionOptions& options, unsigned threads) {
  return Sizes::of(model, options, std::max(1u, threads)).bytes();
}

uint64_t LlamaSession::kv_bytes_for(const ModelConfig& config, const SessionOptions& options) {
  return KvCache::bytes_for(config, options.kv_type, default_ctx(config, options.n_ctx)) *
         static_cast<uint64_t>(std::max<int64_t>(options.n_seq, 1));
}

void LlamaSession::matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y, MatKind kind) {
  // runs_ describe the activation of runs_n_ rows (core/compute/matmul.h splits by sequence).
  const bool split = runs_.size() > 2 && n == runs_n_;
  core::matmul(w, x, n, y, kind, mm_scratch_, pool_, offload_, split ? std::span<const int64_t>(runs_) : std::span<const int64_t>{});
}

void LlamaSession::ffn_dense(const Tensor& gate, const Tensor& up, const Tensor& down, int64_t n, float* out) {
  const int64_t F = up.ne[1];
  const std::span<const float> in{cur_.data(), sz(n * model_.config().n_embd)};
  matmul(up.matrix(), in.data(), n, ffn_u_.data());
  matmul(gate.matrix(), in.data(), n, ffn_g_.data());
  const std::span<float> g{ffn_g_.data(), sz(n * F)};
  kernels::swiglu(g, {ffn_u_.data(), sz(n * F)}, g);
  matmul(down.matrix(), ffn_g_.data(), n, out);
}

std::span<const float> LlamaSession::forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits) {
  const ModelConfig& c = model_.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = c.n_embd;
  if (n > n_batch_)
    throw Error(ErrorCode::invalid_argument, "batch of " + std::to_string(n) + " tokens exceeds the batch size " +
                                                 std::to_string(n_batch_));
  if (start_pos < 0 || start_pos + n > n_ctx())
    throw Error(ErrorCode::invalid_argument, std::to_string(n) + " tokens at position " + std::to_string(start_pos) +
                                                 " do not fit the context of " + std::to_string(n_ctx()) +
                                                 " tokens (raise -c)");
  std::fill(seq_used_.begin(), seq_used_.end(), 0);
  std::fill(seq_count_.begin(), seq_count_.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    pos_[sz(t)] = start_pos + t;
    seq_[sz(t)] = 0;
  }
  check_logit_rows(all_logits ? n : 1, logit_rows_);
  seq_used_[0] = start_pos + n;
  seq_count_[0] = n;
  runs_.assign({0, n});
  runs_n_ = n;
  run_layers(tokens);
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t n_out = n - first;
  const std::span<float> xo{x_.data() + first * E, sz(n_out * E)};
  const std::span<float> co{cur_.data(), sz(n_out * E)};
  kernels::rms_norm(xo, model_.output_norm().f32(), c.rms_eps, E, co);
  matmul(layers_.acquire_output().matrix(), co.data(), n_out, logits_.data());
  layers_.release_output();
  return {logits_.data(), sz(n_out * c.n_vocab)};
}

std::span<const float> LlamaSession::forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                              std::span<const int64_t> positions,
                                              std::span<const uint8_t> want_logits) {
  const ModelConfig& c = model_.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = c.n_embd;
  if (seqs.size() != tokens.size() || positions.size() != tokens.size() || want_logits.size() != tokens.size())
    throw Error(ErrorCode::invalid_argument, "forward_batch(): tokens, sequences, positions and logit flags differ in length");
  if (n > n_batch_)
    throw Error(ErrorCode::invalid_argument, "batch of " + std::to_string(n) + " tokens exceeds the batch size " +
                                                 std::to_string(n_batch_));
  std::fill(seq_used_.begin(), seq_used_.end(), 0);
  std::fill(seq_count_.begin(), seq_count_.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t s = seqs[sz(t)];
    const int64_t p = positions[sz(t)];
    if (s < 0 || s >= n_seq())
      throw Error(ErrorCode::invalid_argument, "sequence " + std::to_string(s) + " is outside [0, " +
                                                   std::to_string(n_seq()) + ")");
    if (p < 0 || p >= n_ctx())
      throw Error(ErrorCode::invalid_argument, "position " + std::to_string(p) + " does not fit the context of " +
                                                   std::to_string(n_ctx()) + " tokens (raise -c)");
    if (seq_count_[sz(s)] > 0 && p < seq_used_[sz(s)])
      throw Error(ErrorCode::invalid_argument, "positions of sequence " + std::to_string(s) + " must ascend in a batch");
    pos_[sz(t)] = p;
    seq_[sz(t)] = s;
    seq_used_[sz(s)] = p + 1;
    ++seq_count_[sz(s)];
  }
  check_logit_rows(std::count_if(want_logits.begin(), want_logits.end(), [](uint8_t w) { return w != 0; }), logit_rows_);
  runs_.clear();
  for (int64_t t = 0; t < n; ++t)
    if (t == 0 || seqs[sz(t)] != seqs[sz(t - 1)]) runs_.push_back(t);
  runs_.push_back(n);
  runs_n_ = n;
  run_layers(tokens);
  int64_t n_out = 0;
  runs_.clear();
  int32_t last_seq = -1;
  for (int64_t t = 0; t < n; ++t) {
    if (!want_logits[sz(t)]) continue;
    kernels::rms_norm({x_.data() + t * E, sz(E)}, model_.output_norm().f32(), c.rms_eps, E,
                      {cur_.data() + n_out * E, sz(E)});
    if (seqs[sz(t)] != last_seq) runs_.push_back(n_out);
    last_seq = seqs[sz(t)];
    ++n_out;
  }
  runs_.push_back(n_out);
  runs_n_ = n_out;
  if (n_out == 0) return {};
  matmul(layers_.acquire_output().matrix(), cur_.data(), n_out, logits_.data());
  layers_.release_output();
  return {logits_.data(), sz(n_out * c.n_vocab)};
}

void LlamaSession::run_layers(std::span<const int32_t> tokens) {
  const ModelConfig& c = model_.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = c.n_embd;
  if (n == 0) throw Error(ErrorCode::invalid_argument, "forward() needs at least one token");
  model_.embeddings().dequantize(tokens, embd_row_, x_.data());
  const std::span<float> x{x_.data(), sz(n * E)};
  const std::span<float> cur{cur_.data(), sz(n * E)};
  // The first MoE layers are guessed from the token embeddings, so their reads overlap the
  // lead blocks' compute (the dense FFN and every attention before them).
  if (predictor_) predictor_->predict(-1, x, n, experts_, pool_);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    LayerPin<LayerWeights> pin(layers_, il);
    const LayerWeights& L = pin.weights();
    layer_ = &L;
    // Per token: y = x + add (a residual), or y = rms_norm(x) * weight.
    auto residual = [&](const std::vector<float>& add) {
      for_rows(n, [&](int64_t t0, int64_t t1) {
        const std::span<float> rows = x.subspan(sz(t0 * E), sz((t1 - t0) * E));
        kernels::add({add.data() + t0 * E, rows.size()}, rows, rows);
      });
    };
    auto norm = [&](const Tensor& weight) {
      for_rows(n, [&](int64_t t0, int64_t t1) {
        kernels::rms_norm(x.subspan(sz(t0 * E), sz((t1 - t0) * E)), weight.f32(), c.rms_eps, E,
                          cur.subspan(sz(t0 * E), sz((t1 - t0) * E)));
      });
    };
    norm(L.attn_norm);
    if (c.is_mla()) attention_mla(il, n);
    else attention_gqa(il, n);
    residual(attn_out_);  // ffn_inp
    norm(L.ffn_norm);
    if (c.is_moe_layer(il)) ffn_moe(il, n, ffn_out_.data());
    else ffn_dense(L.ffn_gate, L.ffn_up, L.ffn_down, n, ffn_out_.data());
    residual(ffn_out_);  // l_out
  }
  layer_ = nullptr;
}

}  // namespace sluice::core
