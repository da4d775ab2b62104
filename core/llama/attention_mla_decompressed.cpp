// MLA prefill in the decompressed form: a long prompt's keys and values per head.
//
// The absorbed form (attention.cpp, llama.cpp's only form) attends every query head over the
// latent rows: kv_lora + rope = 576 products per score and kv_lora = 512 per value cell, then one
// attn_v_b product per token. Decompressing the latent rows once per batch,
//   k[h][j] = [attn_k_b[h]^T latent[j] | rope[j]]   (qk_nope + qk_rope = 192)
//   v[h][j] =  attn_v_b[h]  latent[j]                (v_head_dim = 128)
// makes it plain multi-head attention, 192 + 128 products per (query, cell) instead of 1,088,
// for a decompression of 2 x kv_lora x 128 products per (cell, head) that a batch of queries
// shares. llama.cpp has no such form, so it runs in sluice's own order, the key-block kernels'
// (kernels/key_block_attention.h): keys in blocks of 16 cells with the lanes across cells, F32
// weights and queries, keys and values rounded to F16 (as llama.cpp stores them without MLA),
// and an online softmax over fixed 256-cell chunks, flash-attention style, so that a chunk's keys
// and values stay in L2 for every query of the batch and no row of scores spans the context. The
// numbers are not the absorbed form's: the form is taken only where SessionOptions::mla_decompress_*
// say, never for decode or short prompts.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/llama/session.h"
#include "kernels/key_block_attention.h"
#include "kernels/quant.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
constexpr int64_t kCells = kernels::kKeyBlockCells;
}  // namespace

bool LlamaSession::mla_decompresses(size_t s) const {
  return mla_heads_ > 0 && seq_count_[s] >= mla_min_tokens_ && seq_used_[s] >= mla_min_cells_;
}

void LlamaSession::attention_mla_decompressed(int64_t il, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = *layer_;
  const int64_t H = c.n_head, N = c.qk_nope, R = c.qk_rope, Lkv = c.kv_lora_rank, V = c.v_head_dim;
  const int64_t K = N + R, W = N + V;  // a key's channels; a weight row: [attn_k_b row | attn_v_b column]
  const size_t k_block = sz(K * kCells);   // uint16 per key block
  const int64_t n_slots = n_slots_;
  for (size_t s = 0; s < kv_.size(); ++s) {
    if (!mla_decompressed_[s] || seq_count_[s] == 0) continue;
    const KvCache& kv = kv_[s];
    const int64_t cells = seq_used_[s];
    // The sequence's tokens in the batch, positions ascending.
    int64_t nt = 0;
    for (int64_t t = 0; t < n; ++t)
      if (sz(seq_[sz(t)]) == s) mla_tokens_[sz(nt++)] = t;
    const int64_t* tok = mla_tokens_.data();
    for (int64_t h0 = 0; h0 < H; h0 += mla_heads_) {
      const int64_t nh = std::min(mla_heads_, H - h0);
      auto k_head = [&](int64_t h) { return reinterpret_cast<uint16_t*>(mla_rows_.data() + sz(h - h0) * mla_k_head_bytes_); };
      auto v_head = [&](int64_t h) {
        return reinterpret_cast<uint16_t*>(mla_rows_.data() + sz(nh) * mla_k_head_bytes_ + sz(h - h0) * mla_v_head_bytes_);
      };
      auto wt = [&](int64_t h) { return mla_wt_.data() + sz((h - h0) * Lkv * W); };
      // The round's weights in F32, [kv_lora][W] per head: row l is attn_k_b[h]'s row l (its
      // k_nope outputs' weights on latent value l), then column l of attn_v_b[h].
      pool_.parallel_for(n_slots, 1, [&](int64_t s0, int64_t s1) {
        for (int64_t slot = s0; slot < s1; ++slot) {
          float* row = mla_slot(slot) + mla_slot_row_;
          for (int64_t h = h0 + slot; h < h0 + nh; h += n_slots) {
            const kernels::WeightMatrix wk = L.wk_b.slice(h), wv = L.wv_b.slice(h);
            for (int64_t l = 0; l < Lkv; ++l)
              kernels::dequantize_row(wk.type, wk.data + sz(l) * wk.row_stride, wt(h) + l * W, N);
            for (int64_t i = 0; i < V; ++i) {
              kernels::dequantize_row(wv.type, wv.data + sz(i) * wv.row_stride, row, Lkv);
              for (int64_t l = 0; l < Lkv; ++l) wt(h)[l * W + N + i] = row[l];
            }
          }
        }
      });
      // Decompression, a unit per (head, chunk of cells): the chunk's latent rows widened and
      // transposed into input blocks, then its key blocks (the rope rows copied) and value rows.
      const int64_t n_chunks = (cells + kMlaChunkCells - 1) / kMlaChunkCells;
      pool_.parallel_for(n_slots, 1, [&](int64_t s0, int64_t s1) {
        for (int64_t slot = s0; slot < s1; ++slot) {
          float* lt = mla_slot(slot);
          for (int64_t u = slot; u < nh * n_chunks; u += n_slots) {
            const int64_t h = h0 + u / n_chunks, j0 = (u % n_chunks) * kMlaChunkCells;
            const int64_t m = std::min(kMlaChunkCells, cells - j0), blocks = (m + kCells - 1) / kCells;
            std::fill(lt, lt + blocks * Lkv * kCells, 0.0f);
            float* row = mla_slot(slot) + mla_slot_row_;
            for (int64_t j = 0; j < m; ++j) {
              kernels::dequantize_row(GgmlType::F16, kv.k(il, j0 + j), row, Lkv);
              float* x = lt + (j / kCells) * Lkv * kCells + j % kCells;
              for (int64_t l = 0; l < Lkv; ++l) x[l * kCells] = row[l];
            }
            uint16_t* kt = k_head(h) + sz(j0 / kCells) * k_block;
            kernels::decompress_key_blocks(lt, blocks, Lkv, wt(h), sz(W), N, kt, k_block);
            for (int64_t j = 0; j < blocks * kCells; ++j) {
              uint16_t* dst = kt + sz(j / kCells) * k_block + sz(N * kCells + j % kCells);
              const auto* rope = j < m ? reinterpret_cast<const uint16_t*>(kv.k(il, j0 + j) + sz(Lkv) * 2) : nullptr;
              for (int64_t r = 0; r < R; ++r) dst[r * kCells] = rope ? rope[r] : uint16_t{0};
            }
            kernels::decompress_value_rows(lt, m, Lkv, wt(h) + N, sz(W), V, v_head(h) + sz(j0 * V), sz(V));
          }
        }
      });
      // Attention, a unit per (head, group of the sequence's tokens): an online softmax over
      // kMlaPassCells-cell chunks, kMlaQueryTile queries per pass over a chunk's keys and values.
      const int64_t groups = std::min<int64_t>(std::max<int64_t>(1, (2 * n_slots + nh - 1) / nh), (nt + 7) / 8);
      const int64_t per_group = (nt + groups - 1) / groups;
      pool_.parallel_for(n_slots, 1, [&](int64_t s0, int64_t s1) {
        for (int64_t slot = s0; slot < s1; ++slot) {
          float* tile = mla_slot(slot) + mla_slot_tile_;
          float* state = mla_slot(slot) + mla_slot_state_;  // per query: running max, 16 lanes of sums
          for (int64_t u = slot; u < nh * groups; u += n_slots) {
            const int64_t h = h0 + u / groups, i_begin = (u % groups) * per_group;
            const int64_t i_end = std::min(nt, i_begin + per_group);
            if (i_begin >= i_end) continue;
            auto out = [&](int64_t i) { return heads_out_.data() + tok[i] * H * V + h * V; };
            auto pos = [&](int64_t i) { return pos_[sz(tok[i])]; };
            for (int64_t i = i_begin; i < i_end; ++i) {
              float* st = state + (i - i_begin) * 17;
              st[0] = -std::numeric_limits<float>::infinity();
              std::fill(st + 1, st + 17, 0.0f);
              std::fill(out(i), out(i) + V, 0.0f);
            }
            const int64_t last = pos(i_end - 1);
            for (int64_t c0 = 0; c0 <= last; c0 += kMlaPassCells) {
              for (int64_t i0 = i_begin; i0 < i_end; i0 += kMlaQueryTile) {
                const int64_t i1 = std::min(i0 + kMlaQueryTile, i_end);
                int64_t first = i0;
                while (first < i1 && pos(first) < c0) ++first;
                if (first == i1) continue;
                const int64_t n_max = std::min(c0 + kMlaPassCells, pos(i1 - 1) + 1) - c0;
                const float* q[kMlaQueryTile];
                float* scores[kMlaQueryTile];
                float* outs[kMlaQueryTile];
                const size_t rows = sz(i1 - first);
                for (int64_t i = first; i < i1; ++i) {
                  q[i - first] = q_.data() + tok[i] * H * K + h * K;
                  scores[i - first] = tile + (i - first) * kMlaPassCells;
                  outs[i - first] = out(i);
                }
                kernels::key_block_scores(k_head(h) + sz(c0 / kCells) * k_block, k_block, (n_max + kCells - 1) / kCells, K,
                                          {q, rows}, c.kq_scale, {scores, rows});
                for (int64_t i = first; i < i1; ++i) {
                  float* st = state + (i - i_begin) * 17;
                  float* sc = scores[i - first];
                  const int64_t n_vis = std::min(c0 + kMlaPassCells, pos(i) + 1) - c0;
                  const float alpha = kernels::softmax_chunk({sc, sz(n_vis)}, st[0], std::span<float, 16>(st + 1, 16));
                  if (alpha != 1.0f) kernels::scale({out(i), sz(V)}, alpha, {out(i), sz(V)});
                  std::fill(sc + n_vis, sc + n_max, 0.0f);  // cells after its own weigh 0
                }
                kernels::add_weighted_value_rows(v_head(h) + sz(c0 * V), sz(V), n_max, V, {scores, rows}, {outs, rows});
              }
            }
            for (int64_t i = i_begin; i < i_end; ++i) {
              const float* st = state + (i - i_begin) * 17;
              const float inv = 1.0f / kernels::reduce_key_block_lanes(std::span<const float, 16>(st + 1, 16));
              kernels::scale({out(i), sz(V)}, inv, {out(i), sz(V)});
            }
          }
        }
      });
    }
  }
}

}  // namespace sluice::core
