#include "core/compute/mla_decompressed_attention.h"

#include <algorithm>
#include <limits>

#include "kernels/key_block_attention.h"
#include "kernels/quant.h"
#include "kernels/vec_ops.h"

namespace sluice::core {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(std::max<int64_t>(n, 0)); }
size_t align_up(size_t n) { return (n + 63) / 64 * 64; }
constexpr int64_t kCells = kernels::kKeyBlockCells;
// Bytes of decompressed key and value rows held at once (heads per round follow from the context).
constexpr size_t kRowsBytes = size_t{32} << 20;
constexpr int64_t kChunkCells = 128;  // cells decompressed per unit (their input blocks: 256 KiB)
constexpr int64_t kPassCells = 256;   // cells per softmax chunk: its keys and values stay in L2
constexpr int64_t kQueryTile = 8;     // queries per pass over a chunk (the score kernel's tile)
}  // namespace

struct MlaDecompressedAttention::Layout {
  int64_t heads = 0;
  size_t k_head_bytes = 0, v_head_bytes = 0, rows = 0, wt = 0;
  size_t slot_floats = 0, slot_tile = 0, slot_state = 0, slot_row = 0;
};

MlaDecompressedAttention::Layout MlaDecompressedAttention::layout(const MlaShape& s, int64_t n_ctx, int64_t n_batch) {
  Layout z;
  const int64_t cells = (n_ctx + kCells - 1) / kCells * kCells;
  z.k_head_bytes = align_up(sz(cells * (s.qk_nope + s.qk_rope)) * 2);
  z.v_head_bytes = align_up(sz(cells * s.v_head) * 2);
  const size_t head_bytes = z.k_head_bytes + z.v_head_bytes;
  z.heads = std::clamp<int64_t>(static_cast<int64_t>(kRowsBytes / head_bytes), 1, s.n_head);
  z.rows = head_bytes * sz(z.heads);
  z.wt = sz(z.heads * s.kv_lora * (s.qk_nope + s.v_head));
  // A slot: a chunk's input blocks, a query tile's scores, per query a running max and 16 lanes
  // of sums, then one cache row as floats and its rope part as F16.
  z.slot_tile = sz(kChunkCells * s.kv_lora);
  z.slot_state = z.slot_tile + sz(kQueryTile * kPassCells);
  z.slot_row = z.slot_state + sz(n_batch * 17);
  z.slot_floats = z.slot_row + sz(s.kv_lora + s.qk_rope) + sz((s.qk_rope + 1) / 2);
  return z;
}

uint64_t MlaDecompressedAttention::bytes(const MlaShape& shape, int64_t n_ctx, int64_t n_batch, int64_t n_slots) {
  const Layout z = layout(shape, n_ctx, n_batch);
  return z.rows + 4 * (z.wt + z.slot_floats * sz(n_slots));
}

MlaDecompressedAttention::MlaDecompressedAttention(const MlaShape& shape, int64_t n_ctx, int64_t n_batch,
                                                   int64_t n_slots)
    : shape_(shape), n_slots_(std::max<int64_t>(1, n_slots)) {
  const Layout z = layout(shape, n_ctx, n_batch);
  heads_ = z.heads;
  k_head_bytes_ = z.k_head_bytes;
  v_head_bytes_ = z.v_head_bytes;
  slot_floats_ = z.slot_floats;
  slot_tile_ = z.slot_tile;
  slot_state_ = z.slot_state;
  slot_row_ = z.slot_row;
  rows_ = io::AlignedBuffer(z.rows);
  wt_.resize(z.wt);
  slots_.resize(z.slot_floats * sz(n_slots_));
}

ReleasedPages MlaDecompressedAttention::release_scratch() {
  ReleasedPages r;
  r.add(rows_.data(), rows_.size());
  r.add(wt_);
  r.add(slots_);
  return r;
}

void MlaDecompressedAttention::attend(const MlaSequence& seq, const Tensor& wk_b, const Tensor& wv_b,
                                      kernels::ThreadPool& pool) {
  const int64_t H = shape_.n_head, N = shape_.qk_nope, R = shape_.qk_rope, Lkv = shape_.kv_lora, V = shape_.v_head;
  const int64_t K = N + R, W = N + V;  // a key's channels; a weight row: [attn_k_b row | attn_v_b column]
  const size_t k_block = sz(K * kCells);  // uint16 per key block
  const int64_t n_slots = n_slots_, cells = seq.cells, nt = static_cast<int64_t>(seq.rows.size());
  if (nt == 0) return;
  for (int64_t h0 = 0; h0 < H; h0 += heads_) {
    const int64_t nh = std::min(heads_, H - h0);
    auto k_head = [&](int64_t h) { return reinterpret_cast<uint16_t*>(rows_.data() + sz(h - h0) * k_head_bytes_); };
    auto v_head = [&](int64_t h) {
      return reinterpret_cast<uint16_t*>(rows_.data() + sz(nh) * k_head_bytes_ + sz(h - h0) * v_head_bytes_);
    };
    auto wt = [&](int64_t h) { return wt_.data() + sz((h - h0) * Lkv * W); };
    // The round's weights in F32, [kv_lora][W] per head: row l is attn_k_b[h]'s row l (its k_nope
    // outputs' weights on latent value l), then column l of attn_v_b[h].
    pool.parallel_for(n_slots, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        float* row = slot(s) + slot_row_;
        for (int64_t h = h0 + s; h < h0 + nh; h += n_slots) {
          const kernels::WeightMatrix wk = wk_b.slice(h), wv = wv_b.slice(h);
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
    // transposed into input blocks, then its key blocks (the rope rows copied in F16) and value rows.
    const int64_t n_chunks = (cells + kChunkCells - 1) / kChunkCells;
    pool.parallel_for(n_slots, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        float* lt = slot(s);
        float* row = slot(s) + slot_row_;
        auto* rope16 = reinterpret_cast<uint16_t*>(row + Lkv + R);
        for (int64_t u = s; u < nh * n_chunks; u += n_slots) {
          const int64_t h = h0 + u / n_chunks, j0 = (u % n_chunks) * kChunkCells;
          const int64_t m = std::min(kChunkCells, cells - j0), blocks = (m + kCells - 1) / kCells;
          uint16_t* kt = k_head(h) + sz(j0 / kCells) * k_block;
          std::fill(lt, lt + blocks * Lkv * kCells, 0.0f);
          for (int64_t j = 0; j < blocks * kCells; ++j) {
            uint16_t* rope_dst = kt + sz(j / kCells) * k_block + sz(N * kCells + j % kCells);
            if (j >= m) {
              for (int64_t r = 0; r < R; ++r) rope_dst[r * kCells] = 0;
              continue;
            }
            kernels::dequantize_row(seq.type, seq.cache + sz(j0 + j) * seq.cache_stride, row, Lkv + R);
            float* x = lt + (j / kCells) * Lkv * kCells + j % kCells;
            for (int64_t l = 0; l < Lkv; ++l) x[l * kCells] = row[l];
            if (R > 0) kernels::quantize_row(GgmlType::F16, row + Lkv, reinterpret_cast<std::byte*>(rope16), R);
            for (int64_t r = 0; r < R; ++r) rope_dst[r * kCells] = rope16[r];
          }
          kernels::decompress_key_blocks(lt, blocks, Lkv, wt(h), sz(W), N, kt, k_block);
          kernels::decompress_value_rows(lt, m, Lkv, wt(h) + N, sz(W), V, v_head(h) + sz(j0 * V), sz(V));
        }
      }
    });
    // Attention, a unit per (head, group of the sequence's tokens): an online softmax over
    // kPassCells-cell chunks, kQueryTile queries per pass over a chunk's keys and values.
    const int64_t groups = std::min<int64_t>(std::max<int64_t>(1, (2 * n_slots + nh - 1) / nh), (nt + 7) / 8);
    const int64_t per_group = (nt + groups - 1) / groups;
    pool.parallel_for(n_slots, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        float* tile = slot(s) + slot_tile_;
        float* state = slot(s) + slot_state_;  // per query: running max, 16 lanes of sums
        for (int64_t u = s; u < nh * groups; u += n_slots) {
          const int64_t h = h0 + u / groups, i_begin = (u % groups) * per_group;
          const int64_t i_end = std::min(nt, i_begin + per_group);
          if (i_begin >= i_end) continue;
          auto out = [&](int64_t i) { return seq.out + sz(seq.rows[sz(i)]) * seq.out_stride + sz(h * V); };
          auto pos = [&](int64_t i) { return seq.pos[seq.rows[sz(i)]]; };
          for (int64_t i = i_begin; i < i_end; ++i) {
            float* st = state + (i - i_begin) * 17;
            st[0] = -std::numeric_limits<float>::infinity();
            std::fill(st + 1, st + 17, 0.0f);
            std::fill(out(i), out(i) + V, 0.0f);
          }
          const int64_t last = pos(i_end - 1);
          for (int64_t c0 = 0; c0 <= last; c0 += kPassCells) {
            for (int64_t i0 = i_begin; i0 < i_end; i0 += kQueryTile) {
              const int64_t i1 = std::min(i0 + kQueryTile, i_end);
              int64_t first = i0;
              while (first < i1 && pos(first) < c0) ++first;
              if (first == i1) continue;
              const int64_t n_max = std::min(c0 + kPassCells, pos(i1 - 1) + 1) - c0;
              const float* q[kQueryTile];
              float* scores[kQueryTile];
              float* outs[kQueryTile];
              const size_t n_rows = sz(i1 - first);
              for (int64_t i = first; i < i1; ++i) {
                q[i - first] = seq.q + sz(seq.rows[sz(i)]) * seq.q_stride + sz(h * K);
                scores[i - first] = tile + (i - first) * kPassCells;
                outs[i - first] = out(i);
              }
              kernels::key_block_scores(k_head(h) + sz(c0 / kCells) * k_block, k_block, (n_max + kCells - 1) / kCells, K,
                                        {q, n_rows}, shape_.kq_scale, {scores, n_rows});
              for (int64_t i = first; i < i1; ++i) {
                float* st = state + (i - i_begin) * 17;
                float* sc = scores[i - first];
                const int64_t n_vis = std::min(c0 + kPassCells, pos(i) + 1) - c0;
                const float alpha = kernels::softmax_chunk({sc, sz(n_vis)}, st[0], std::span<float, 16>(st + 1, 16));
                if (alpha != 1.0f) kernels::scale({out(i), sz(V)}, alpha, {out(i), sz(V)});
                std::fill(sc + n_vis, sc + n_max, 0.0f);  // cells after its own weigh 0
              }
              kernels::add_weighted_value_rows(v_head(h) + sz(c0 * V), sz(V), n_max, V, {scores, n_rows}, {outs, n_rows});
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

}  // namespace sluice::core
