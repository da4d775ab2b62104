// MLA prefill in the decompressed form: a long prompt's keys and values per head.
//
// The absorbed form (attention.cpp, llama.cpp's only form) attends every query head over the
// latent rows: kv_lora + rope = 576 products per score and kv_lora = 512 per value cell, then one
// attn_v_b product per token. Decompressing the latent rows once per batch,
//   k[h][j] = [attn_k_b[h]^T latent[j] | rope[j]]   (qk_nope + qk_rope = 192)
//   v[h][j] =  attn_v_b[h]  latent[j]                (v_head_dim = 128)
// makes it plain multi-head attention, 192 + 128 products per (query, cell) instead of 1,088,
// for a decompression of 2 x kv_lora x 128 products per (cell, head) that a batch of queries
// shares. Each attends with the F16 cache's kernels and orders (keys and values rounded to F16,
// as llama.cpp stores them without MLA), so the numbers are not the absorbed form's: the form is
// taken only where SessionOptions::mla_decompress_* say, never for decode or short prompts.
#include <algorithm>
#include <cstring>

#include "core/llama/session.h"
#include "kernels/quant.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
// Weight rows per block of the decompression products: 128 rows of kv_lora = 512 F16 values
// (128 KiB) stay in a core's L2 while every cell of a chunk meets them.
constexpr int64_t kMlaRowBlock = 128;
}  // namespace

bool LlamaSession::mla_decompresses(size_t s) const {
  return mla_heads_ > 0 && seq_count_[s] >= mla_min_tokens_ && seq_used_[s] >= mla_min_cells_;
}

void LlamaSession::attention_mla_decompressed(int64_t il, int64_t n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = *layer_;
  const int64_t H = c.n_head, N = c.qk_nope, R = c.qk_rope, Lkv = c.kv_lora_rank, V = c.v_head_dim;
  const int64_t K = N + R, NV = N + V;
  const size_t k_head_bytes = mla_k_head_bytes_, v_head_bytes = mla_v_head_bytes_;
  std::byte* k_rows = mla_rows_.data();
  std::byte* v_rows = k_rows + sz(mla_heads_) * k_head_bytes;
  auto* w16 = reinterpret_cast<uint16_t*>(mla_w16_.data());
  const auto w_row = [&](int64_t r) { return reinterpret_cast<std::byte*>(w16 + r * Lkv); };
  // Each cell's products sum its F16 latent row with F16 weight rows in the batched key product's
  // order (tinyBLAS) where kv_lora allows it; the same tiled kernel as the scores.
  const bool tiny_blas = Lkv % 16 == 0;
  for (size_t s = 0; s < kv_.size(); ++s) {
    if (!mla_decompressed_[s] || seq_count_[s] == 0) continue;
    const KvCache& kv = kv_[s];
    const int64_t cells = seq_used_[s];
    for (int64_t h0 = 0; h0 < H; h0 += mla_heads_) {
      const int64_t nh = std::min(mla_heads_, H - h0), rows = nh * NV;
      // The round's weights as F16 rows of kv_lora values: first attn_k_b[h]^T (attn_k_b[h] is
      // [kv_lora rows][qk_nope]; row i of its transpose gives k_nope[i]), then attn_v_b[h]'s rows.
      for (int64_t h = h0; h < h0 + nh; ++h) {
        const kernels::WeightMatrix wk = L.wk_b.slice(h);
        for (int64_t l = 0; l < Lkv; ++l)
          kernels::dequantize_row(wk.type, wk.data + sz(l) * wk.row_stride, mla_wk_.data() + l * N, N);
        for (int64_t i = 0; i < N; ++i) {
          for (int64_t l = 0; l < Lkv; ++l) mla_row_[sz(l)] = mla_wk_[sz(l * N + i)];
          kernels::quantize_row(GgmlType::F16, mla_row_.data(), w_row((h - h0) * N + i), Lkv);
        }
        const kernels::WeightMatrix wv = L.wv_b.slice(h);
        for (int64_t i = 0; i < V; ++i) {
          kernels::dequantize_row(wv.type, wv.data + sz(i) * wv.row_stride, mla_row_.data(), Lkv);
          kernels::quantize_row(GgmlType::F16, mla_row_.data(), w_row(nh * N + (h - h0) * V + i), Lkv);
        }
      }
      for (int64_t j0 = 0; j0 < cells; j0 += mla_chunk_cells_) {
        const int64_t m = std::min(mla_chunk_cells_, cells - j0);
        // [m][rows] products; a block of weight rows stays in a core's L2 for every cell of the chunk.
        pool_.parallel_for((rows + kMlaRowBlock - 1) / kMlaRowBlock, 1, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t r0 = b * kMlaRowBlock, nr = std::min(kMlaRowBlock, rows - r0);
            for (int64_t j = 0; j < m; j += 4) {
              const uint16_t* q[4];
              float* out[4];
              const int64_t nq = std::min<int64_t>(4, m - j);
              for (int64_t i = 0; i < nq; ++i) {
                q[i] = reinterpret_cast<const uint16_t*>(kv.k(il, j0 + j + i));
                out[i] = mla_prod_.data() + (j + i) * rows + r0;
              }
              if (tiny_blas)
                kernels::dot_f16_rows_tinyblas(w_row(r0), sz(Lkv) * 2, nr, Lkv, {q, sz(nq)}, {out, sz(nq)});
              else
                kernels::dot_f16_rows(w_row(r0), sz(Lkv) * 2, nr, Lkv, {q, sz(nq)}, {out, sz(nq)});
            }
          }
        });
        // Rounded to F16 into each head's rows: keys [k_nope | the cached rope], values.
        for_rows(m, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) {
            const float* p = mla_prod_.data() + j * rows;
            for (int64_t h = 0; h < nh; ++h) {
              std::byte* k = k_rows + sz(h) * k_head_bytes + sz((j0 + j) * K) * 2;
              kernels::quantize_row(GgmlType::F16, p + h * N, k, N);
              std::memcpy(k + sz(N) * 2, kv.k(il, j0 + j) + sz(Lkv) * 2, sz(R) * 2);
              kernels::quantize_row(GgmlType::F16, p + nh * N + h * V, v_rows + sz(h) * v_head_bytes + sz((j0 + j) * V) * 2,
                                    V);
            }
          }
        });
      }
      const AttnPart part{h0, h0 + nh, static_cast<int32_t>(s),
                          KvRows{k_rows, sz(K) * 2, k_head_bytes, v_rows, sz(V) * 2, v_head_bytes}};
      // q rows are [nope | rope] per head, as the keys; the output is each head's v_head_dim values.
      attend(il, n, q_.data(), H * K, K, K, V, heads_out_.data(), H * V, V, &part);
    }
  }
}

}  // namespace sluice::core
