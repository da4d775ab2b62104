// Session attention: GQA (llama, qwen3moe) and absorbed MLA (deepseek2), as llama.cpp's graphs.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/llama/session.h"
#include "kernels/dot_f32.h"
#include "kernels/matvec.h"
#include "kernels/quant.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/softmax.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
size_t align_up(size_t n) { return (n + 63) / 64 * 64; }
// llama.cpp pads the attended KV cells to a multiple of 256 (capped by the cache size).
constexpr int64_t kKvPad = 256;
// Bytes of key (or value) rows one pass of a query tile reads: they stay in a core's L2.
constexpr size_t kKvTileBytes = 256 * 1024;
size_t slice_bytes(const Tensor& t) { return sz(t.ne[1]) * t.row_bytes; }
}  // namespace

// One token's per-head products (MLA's attn_k_b/attn_v_b) go to the pool in one hand-off where the
// per-head matmul would be a plain vec_dot per row anyway: a quantized type, not repacked, not
// offloaded. F32/F16 heads keep matmul's own paths (their order depends on the view).
bool LlamaSession::all_heads_at_once(const Tensor& t) const {
  return !offload_ && t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.slice(0).repack == kernels::GgmlRepack::none;
}

void LlamaSession::attention_gqa(int64_t il, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = *layer_;
  const int64_t H = c.n_head, Hkv = c.n_head_kv, Dk = c.head_dim_k, Dv = c.head_dim_v;
  matmul(L.wq.matrix(), cur_.data(), n, q_.data());
  matmul(L.wk.matrix(), cur_.data(), n, k_.data());
  matmul(L.wv.matrix(), cur_.data(), n, v_.data());
  if (L.q_norm) {
    const std::span<float> q{q_.data(), sz(n * H * Dk)};
    kernels::rms_norm(q, L.q_norm.f32(), c.rms_eps, Dk, q);
  }
  if (L.k_norm) {
    const std::span<float> k{k_.data(), sz(n * Hkv * Dk)};
    kernels::rms_norm(k, L.k_norm.f32(), c.rms_eps, Dk, k);
  }
  for (int64_t t = 0; t < n; ++t) {
    KvCache& kv = kv_[sz(seq_[sz(t)])];
    kernels::rope_cache(c.rope, pos_[sz(t)], rope_cache_);
    kernels::rope_apply(c.rope, rope_cache_, q_.data() + t * H * Dk, H, Dk);
    kernels::rope_apply(c.rope, rope_cache_, k_.data() + t * Hkv * Dk, Hkv, Dk);
    kv.store(k_.data() + t * Hkv * Dk, kv.k(il, pos_[sz(t)]), Hkv * Dk);
    kv.store(v_.data() + t * Hkv * Dv, kv.v(il, pos_[sz(t)]), Hkv * Dv);
  }
  attend(il, n, q_.data(), H * Dk, Dk, Dk, Dv, heads_out_.data(), H * Dv, Dv);
  matmul(L.wo.matrix(), heads_out_.data(), n, attn_out_.data());
}

void LlamaSession::attention_mla(int64_t il, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = *layer_;
  const int64_t H = c.n_head, N = c.qk_nope, R = c.qk_rope, Lkv = c.kv_lora_rank, V = c.v_head_dim;
  const int64_t QH = N + R;  // per-head q: [nope | rope]
  const int64_t KR = Lkv + R;  // cache row and absorbed q: [latent | rope], llama.cpp's concat order
  if (c.q_lora_rank > 0) {
    matmul(L.wq_a.matrix(), cur_.data(), n, qa_.data());
    const std::span<float> qa{qa_.data(), sz(n * c.q_lora_rank)};
    kernels::rms_norm(qa, L.q_a_norm.f32(), c.rms_eps, c.q_lora_rank, qa);
    matmul(L.wq_b.matrix(), qa_.data(), n, q_.data());
  } else {
    matmul(L.wq.matrix(), cur_.data(), n, q_.data());
  }
  matmul(L.wkv_a_mqa.matrix(), cur_.data(), n, kva_.data());
  for (int64_t t = 0; t < n; ++t) {
    float* q = q_.data() + t * H * QH;
    float* kva = kva_.data() + t * KR;  // [latent | rope] as the projection emits it
    kernels::rope_cache(c.rope, pos_[sz(t)], rope_cache_);
    kernels::rope_apply(c.rope, rope_cache_, q + N, H, QH);
    kernels::rope_apply(c.rope, rope_cache_, kva + Lkv, 1, R);
    const std::span<float> latent{kva, sz(Lkv)};
    kernels::rms_norm(latent, L.kv_a_norm.f32(), c.rms_eps, Lkv, latent);
    // Kcur = [latent | k_pe], as the projection emits it; Qcur[h] = [absorbed q_nope | q_pe]
    // (the absorbed part is filled below). The order is the order the score dot sums in.
    KvCache& kv = kv_[sz(seq_[sz(t)])];
    kv.store(kva, kv.k(il, pos_[sz(t)]), KR);
    for (int64_t h = 0; h < H; ++h) std::memcpy(qcur_.data() + (t * H + h) * KR + Lkv, q + h * QH + N, sz(R) * 4);
  }
  // Long prompts take the decompressed form (attention_mla_decompressed.cpp); the absorbed one
  // below runs when some sequence of the batch does not.
  bool any_absorbed = false;
  for (size_t s = 0; s < kv_.size(); ++s) {
    mla_decompressed_[s] = mla_decompresses(s);
    any_absorbed = any_absorbed || (seq_count_[s] > 0 && !mla_decompressed_[s]);
  }
  if (!any_absorbed) {
    attention_mla_decompressed(il, n);
    matmul(L.wo.matrix(), heads_out_.data(), n, attn_out_.data());
    return;
  }
  // q_nope_absorbed[h] = wk_b[h] q_nope[h]: [qk_nope] -> [kv_lora]
  if (n == 1 && all_heads_at_once(L.wk_b)) {
    kernels::matvec_slices(L.wk_b.slice(0), slice_bytes(L.wk_b), H, q_.data(), sz(QH), qcur_.data(), sz(KR),
                           mm_scratch_, pool_);
  } else {
    for (int64_t h = 0; h < H; ++h) {
      for_rows(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) std::memcpy(head_in_.data() + t * N, q_.data() + t * H * QH + h * QH, sz(N) * 4);
      });
      matmul(L.wk_b.slice(h), head_in_.data(), n, head_res_.data(), MatKind::permuted);  // q_nope view
      for_rows(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          std::memcpy(qcur_.data() + (t * H + h) * KR, head_res_.data() + t * Lkv, sz(Lkv) * 4);
      });
    }
  }
  attend(il, n, qcur_.data(), H * KR, KR, KR, Lkv, kqv_.data(), H * Lkv, Lkv);
  // decompress: out[h] = wv_b[h] kqv[h]: [kv_lora] -> [v_head]
  if (n == 1 && all_heads_at_once(L.wv_b)) {
    kernels::matvec_slices(L.wv_b.slice(0), slice_bytes(L.wv_b), H, kqv_.data(), sz(Lkv), heads_out_.data(), sz(V),
                           mm_scratch_, pool_);
  } else {
    for (int64_t h = 0; h < H; ++h) {
      for_rows(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          std::memcpy(head_in_.data() + t * Lkv, kqv_.data() + (t * H + h) * Lkv, sz(Lkv) * 4);
      });
      matmul(L.wv_b.slice(h), head_in_.data(), n, head_res_.data());
      for_rows(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          std::memcpy(heads_out_.data() + t * H * V + h * V, head_res_.data() + t * V, sz(V) * 4);
      });
    }
  }
  attention_mla_decompressed(il, n);  // the other sequences' rows of heads_out_, if any
  matmul(L.wo.matrix(), heads_out_.data(), n, attn_out_.data());
}

void LlamaSession::attend(int64_t il, int64_t n, const float* q, int64_t q_stride,
                     int64_t q_head_stride, int64_t k_len, int64_t v_len, float* out, int64_t out_stride,
                     int64_t out_head_stride) {
  const ModelConfig& c = model_.config();
  const int64_t group = c.is_mla() ? c.n_head : c.n_head / c.n_head_kv;
  const GgmlType kt = kv_[0].type();
  const GgmlType qt = kernels::vec_dot_type(kt);
  const size_t es = kv_[0].elem_bytes();
  const int64_t n_ctx = kv_[0].n_ctx();
  const bool mla = c.is_mla();
  const bool f32 = kt == GgmlType::F32;
  const float kq_scale = c.kq_scale;
  // The cache is F32 or F16 (KvCache refuses the rest). An F16 cache takes the heads of one KV
  // head kAttnHeadBlock at a time, so each value row is widened once for all of them (MLA: all
  // 64 heads share one latent row). Every output element still sums the same products in the
  // same order over the cells.
  const int64_t block = !f32 && group % kAttnHeadBlock == 0 ? kAttnHeadBlock : 1;
  const int64_t head_blocks = c.n_head / block;
  // Tiles: up to attn_tile_tokens_ consecutive tokens of one sequence (1 for an F32 cache), whose
  // query rows share every pass over the cells. A prefill then reads the layer's cache once per
  // (tile, head block) instead of once per (token, head block): the cost was that traffic.
  const int64_t tile_tokens = attn_tile_tokens_;
  int64_t n_tiles = 0;
  for (int64_t t = 0; t < n; ++t)
    if (t == 0 || seq_[sz(t)] != seq_[sz(t - 1)] || t - attn_tiles_[sz(n_tiles - 1)] == tile_tokens)
      attn_tiles_[sz(n_tiles++)] = t;
  attn_tiles_[sz(n_tiles)] = n;
  // Cells per pass: a tile of key (then value) rows that stays in L2 while every query row of
  // the tile reads it.
  const int64_t cells = attn_tile_cells_ > 0
                            ? attn_tile_cells_
                            : std::max<int64_t>(64, static_cast<int64_t>(kKvTileBytes / (sz(k_len) * es)) / 64 * 64);
  const int64_t n_units = n_tiles * head_blocks;
  const int64_t n_slots = n_slots_;
  const size_t rows = sz(attn_tile_tokens_ * kAttnHeadBlock);
  const size_t scores_bytes = align_up(sz(n_ctx) * 4);
  const size_t qact_bytes = align_up(ggml_row_bytes(qt, static_cast<uint64_t>(k_len)));
  const size_t lanes_floats = align_up(sz(16 * v_len) * 4) / 4;  // tinyBLAS's 16 lanes of a value sum
  pool_.parallel_for(n_slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t slot = s0; slot < s1; ++slot) {
      // Slot layout (Sizes::of): a score row per query row of a tile, the F16-rounded softmax, a
      // quantized q row per query row, a value column, then (F16 cache) 16 lanes of value sums
      // per query row and the value kernel's transposed tile.
      std::byte* base = slots_.data() + sz(slot) * slot_bytes_;
      std::byte* p16 = base + rows * scores_bytes;
      std::byte* qact_base = p16 + align_up(sz(n_ctx) * 2);
      float* vcol = reinterpret_cast<float*>(qact_base + rows * qact_bytes);
      float* lanes_base = reinterpret_cast<float*>(reinterpret_cast<std::byte*>(vcol) + scores_bytes);
      float* lanes_scratch = lanes_base + rows * lanes_floats;
      for (int64_t u = slot; u < n_units; u += n_slots) {
        const int64_t tile = u / head_blocks;
        const int64_t t0 = attn_tiles_[sz(tile)], t1 = attn_tiles_[sz(tile + 1)];
        const int64_t nt = t1 - t0, h0 = (u % head_blocks) * block;
        const int64_t kvh = h0 / group;
        if (mla_decompressed_[sz(seq_[sz(t0)])] != 0) continue;  // attention_mla_decompressed's
        auto n_vis = [&](int64_t i) { return pos_[sz(t0 + i)] + 1; };  // causal: token t0 + i of the tile
        // Per sequence, as a single-sequence pass of its tokens would: llama.cpp attends over n_kv
        // cells, the used cells rounded up to its padding, capped by the cache size; masked cells
        // weigh exactly 0 but shape the SIMD blocks of softmax and the sums.
        const size_t s = sz(seq_[sz(t0)]);
        const KvCache& kv = kv_[s];
        const int64_t used = seq_used_[s];
        const int64_t n_kv = std::min(n_ctx, std::max(kKvPad, (used + kKvPad - 1) / kKvPad * kKvPad));
        // MLA: the latent row is key and value (its first kv_lora values).
        const std::byte* k_base = kv.k(il, 0) + sz(kvh) * sz(k_len) * es;
        const std::byte* v_base = mla ? kv.k(il, 0) : kv.v(il, 0) + sz(kvh) * sz(v_len) * es;
        const size_t k_stride = kv.k_row_bytes(), v_stride = mla ? kv.k_row_bytes() : kv.v_row_bytes();
        auto k_row = [&](int64_t j) { return k_base + sz(j) * k_stride; };
        auto v_row = [&](int64_t j) { return v_base + sz(j) * v_stride; };
        auto score_row = [&](int64_t r) { return reinterpret_cast<float*>(base + sz(r) * scores_bytes); };
        // ggml's mul_mat sees this sequence's tokens as >= 2 activation rows: llamafile's tinyBLAS
        // takes kq x V (F32 cache), and for an F16 cache both K q and V^T kq once the activation is
        // rounded to F16, where the summed length is a multiple of 16 (tinyblas_kq / tinyblas_kqv).
        const bool batched = seq_count_[s] >= 2;
        if (f32) {
          const int64_t t = t0;  // F32 tiles hold one token
          const bool tiny_blas = batched && n_kv % 16 == 0;
          for (int64_t h = h0; h < h0 + block; ++h) {
            float* scores = score_row(h - h0);
            const float* qv = q + t * q_stride + h * q_head_stride;
            for (int64_t j = 0; j < n_vis(0); ++j)
              scores[j] = kernels::dot_f32_ggml_vec(reinterpret_cast<const float*>(k_row(j)), qv, k_len);
            std::fill(scores + n_vis(0), scores + n_kv, -std::numeric_limits<float>::infinity());
            kernels::softmax({scores, sz(n_kv)}, kq_scale);
            float* o = out + t * out_stride + h * out_head_stride;
            // ggml: kqv = V^T kq, one dot per value channel over the n_kv cells
            for (int64_t i = 0; i < v_len; ++i) {
              for (int64_t j = 0; j < n_kv; ++j)
                vcol[j] = j < used ? reinterpret_cast<const float*>(v_row(j))[i] : 0.0f;
              o[i] = tiny_blas ? kernels::dot_f32_tinyblas(vcol, scores, n_kv)
                               : kernels::dot_f32_ggml_vec(vcol, scores, n_kv);
            }
          }
          continue;
        }
        // F16 cache: query row r = i * block + b is head h0 + b of token t0 + i.
        const bool tinyblas_kq = batched && k_len % 16 == 0;
        const bool tinyblas_kqv = batched && n_kv % 16 == 0;
        auto lanes = [&](int64_t r) { return lanes_base + sz(r) * lanes_floats; };
        const uint16_t* q16[kAttnMaxTileTokens * kAttnHeadBlock];
        float* outs[kAttnMaxTileTokens * kAttnHeadBlock];
        for (int64_t i = 0; i < nt; ++i) {
          for (int64_t b = 0; b < block; ++b) {
            std::byte* qact = qact_base + sz(i * block + b) * qact_bytes;
            kernels::quantize_row(qt, q + (t0 + i) * q_stride + (h0 + b) * q_head_stride, qact, k_len);
            q16[i * block + b] = reinterpret_cast<const uint16_t*>(qact);
            outs[i * block + b] = out + (t0 + i) * out_stride + (h0 + b) * out_head_stride;
          }
        }
        const int64_t max_vis = n_vis(nt - 1);  // a sequence's positions ascend in a batch
        // One token (decode) reuses nothing across tiles: it reads its cells in one pass.
        const int64_t pass = nt == 1 ? max_vis : cells;
        // Scores: each tile of key rows (widened once per token for the block's heads) serves every
        // token that sees it; each score is still vec_dot's of the same q and k rows.
        // With one head per block, kAttnHeadBlock tokens share a call (the kernels' query tile), up
        // to the last one's visible cells: an earlier token's scores past its own are computed
        // and then masked below, each score still the same dot.
        const int64_t step = block == 1 ? kAttnHeadBlock : 1;
        for (int64_t j0 = 0; j0 < max_vis; j0 += pass) {
          for (int64_t i = 0; i < nt; i += step) {
            const int64_t i1 = std::min(nt, i + step);
            const int64_t j1 = std::min(j0 + pass, n_vis(i1 - 1));
            if (j1 <= j0) continue;
            const size_t n_rows = sz((i1 - i) * block);
            float* tile_scores[kAttnHeadBlock];
            for (size_t r = 0; r < n_rows; ++r) tile_scores[r] = score_row(i * block + static_cast<int64_t>(r)) + j0;
            if (tinyblas_kq)
              kernels::dot_f16_rows_tinyblas(k_row(j0), k_stride, j1 - j0, k_len, {q16 + i * block, n_rows},
                                             {tile_scores, n_rows});
            else
              kernels::dot_f16_rows(k_row(j0), k_stride, j1 - j0, k_len, {q16 + i * block, n_rows},
                                    {tile_scores, n_rows});
          }
        }
        // The softmax sees each query row's whole score row; ggml rounds kq to F16 for an F16 V.
        for (int64_t r = 0; r < nt * block; ++r) {
          float* scores = score_row(r);
          std::fill(scores + n_vis(r / block), scores + n_kv, -std::numeric_limits<float>::infinity());
          kernels::softmax({scores, sz(n_kv)}, kq_scale);
          kernels::quantize_row(GgmlType::F16, scores, p16, n_vis(r / block));
          kernels::dequantize_row(GgmlType::F16, p16, scores, n_vis(r / block));
          if (tinyblas_kqv)
            std::fill(lanes(r), lanes(r) + 16 * v_len, 0.0f);
          else
            std::fill(outs[r], outs[r] + v_len, 0.0f);
        }
        if (tinyblas_kqv) {
          // tinyBLAS sums every cell up to n_kv, those a query row does not see with weight +0
          // (its softmax gave exactly 0 there): fma(v, +0, acc) leaves acc as it is. So every query
          // row of the tile takes one call per pass, and the pass can be the kernel's whole group of
          // cells, so that the 16-lane accumulators go through memory once per group.
          const float* all_w[kAttnMaxTileTokens * kAttnHeadBlock];
          float* all_lanes[kAttnMaxTileTokens * kAttnHeadBlock];
          const int64_t n_rows_tile = nt * block;
          const int64_t vpass = nt == 1 ? max_vis : std::max(pass, kernels::fma_f16_rows_group_cells());
          for (int64_t j0 = 0; j0 < max_vis; j0 += vpass) {
            const int64_t j1 = std::min(j0 + vpass, max_vis);
            for (int64_t r = 0; r < n_rows_tile; ++r) {
              all_w[r] = score_row(r) + j0;
              all_lanes[r] = lanes(r);
            }
            kernels::fma_f16_rows_into_lanes(v_row(j0), v_stride, j0, j1 - j0, v_len, {all_w, sz(n_rows_tile)},
                                             {all_lanes, sz(n_rows_tile)}, lanes_scratch);
          }
          for (int64_t r = 0; r < n_rows_tile; ++r) kernels::reduce_tinyblas_lanes(lanes(r), v_len, outs[r]);
          continue;
        }
        // Values in vec_dot's order: each tile of value rows is added to every query row that sees
        // it, cell by cell in order as one pass would (the outputs wait in memory between tiles:
        // exact). Query rows whose tile ends at the same cell share one call, so each row is
        // widened once for them.
        for (int64_t j0 = 0; j0 < max_vis; j0 += pass) {
          const float* group_w[kAttnMaxTileTokens * kAttnHeadBlock];
          float* group_o[kAttnMaxTileTokens * kAttnHeadBlock];
          size_t n_group = 0;
          int64_t group_end = j0;
          auto flush = [&] {
            if (n_group > 0)
              kernels::add_scaled_f16_rows(v_row(j0), v_stride, group_end - j0, v_len, {group_w, n_group},
                                           {group_o, n_group});
            n_group = 0;
          };
          for (int64_t i = 0; i < nt; ++i) {
            const int64_t j1 = std::min(j0 + pass, n_vis(i));
            if (j1 <= j0) continue;
            if (j1 != group_end) flush();
            group_end = j1;
            for (int64_t b = 0; b < block; ++b) {
              group_w[n_group] = score_row(i * block + b) + j0;
              group_o[n_group++] = outs[i * block + b];
            }
          }
          flush();
        }
      }
    }
  });
}

}  // namespace sluice::core
