// MLA prefill in the decompressed form, for every architecture with MLA layers (deepseek2 / Kimi K2
// through LlamaSession, Kimi K3 through KimiK3Session).
//
// The absorbed form (llama.cpp's only one) attends every query head over the latent rows:
// kv_lora + rope = 576 products per score and kv_lora = 512 per value cell, then one attn_v_b
// product per token. Decompressing a sequence's latent rows once per batch,
//   k[h][j] = [attn_k_b[h]^T latent[j] | rope[j]]   (qk_nope + qk_rope values)
//   v[h][j] =  attn_v_b[h]  latent[j]                (v_head_dim values)
// makes it plain multi-head attention, 192 + 128 products per (query, cell) instead of 1,088 on
// Kimi K2's shapes, for a decompression of 2 x kv_lora x 128 products per (cell, head) that a batch
// of queries shares. llama.cpp has no such form, so it runs in sluice's own order, the key-block
// kernels' (kernels/key_block_attention.h): F32 weights and queries, keys and values rounded to
// F16 (as llama.cpp stores them without MLA), keys in blocks of 16 cells, and an online softmax
// over fixed 256-cell chunks, flash-attention style, so that a chunk's keys and values stay in L2
// for every query of the batch and no row of scores spans the context. Each query's output
// depends on its own row, the cells it sees and the chunk boundaries (absolute), not on which
// other queries share its batch.
//
// Memory (bytes(), counted in the session's budget): the key blocks and value rows of as many heads
// as kRowsBytes holds, at least one, over the whole context; those heads' weights in F32; and per
// thread a chunk's input blocks, a query tile's scores, each query's softmax state and a row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/ggml_type.h"
#include "common/release_pages.h"
#include "core/gguf/tensor.h"
#include "io/aligned_buffer.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

struct MlaShape {
  int64_t n_head = 0, qk_nope = 0, qk_rope = 0, kv_lora = 0, v_head = 0;
  float kq_scale = 1.0f;
};

// One sequence's queries of a batch: token rows[i]'s head h reads q + rows[i] * q_stride + h *
// (qk_nope + qk_rope) ([nope | rope]) and writes v_head floats at out + rows[i] * out_stride + h *
// v_head; pos[rows[i]] is its position (ascending in i). The sequence's cache: cells rows of
// [kv_lora latent | qk_rope rope] values of `type`, cell j at cache + j * cache_stride.
struct MlaSequence {
  std::span<const int64_t> rows;
  const int64_t* pos = nullptr;
  const float* q = nullptr;
  size_t q_stride = 0;
  float* out = nullptr;
  size_t out_stride = 0;
  const std::byte* cache = nullptr;
  size_t cache_stride = 0;
  GgmlType type = GgmlType::F16;
  int64_t cells = 0;
};

class MlaDecompressedAttention {
 public:
  // Scratch bytes for contexts of n_ctx cells, batches of n_batch tokens and n_slots threads.
  static uint64_t bytes(const MlaShape& shape, int64_t n_ctx, int64_t n_batch, int64_t n_slots);
  MlaDecompressedAttention(const MlaShape& shape, int64_t n_ctx, int64_t n_batch, int64_t n_slots);

  // Attends seq's queries over its cells with the layer's attn_k_b ([kv_lora rows][qk_nope] per
  // head) and attn_v_b ([v_head rows][kv_lora] per head).
  void attend(const MlaSequence& seq, const Tensor& wk_b, const Tensor& wv_b, kernels::ThreadPool& pool);
  // Returns every buffer's pages to the kernel (common/release_pages.h): attend() rewrites all of
  // them before reading (Session::release_batch_scratch).
  ReleasedPages release_scratch();

 private:
  struct Layout;
  static Layout layout(const MlaShape& shape, int64_t n_ctx, int64_t n_batch);
  float* slot(int64_t s) { return slots_.data() + static_cast<size_t>(s) * slot_floats_; }

  MlaShape shape_;
  int64_t heads_ = 0, n_slots_ = 1;                     // heads per round
  size_t k_head_bytes_ = 0, v_head_bytes_ = 0;          // one head's key blocks (value rows) over the context
  size_t slot_floats_ = 0, slot_tile_ = 0, slot_state_ = 0, slot_row_ = 0;  // a slot's parts (floats)
  io::AlignedBuffer rows_;
  std::vector<float> wt_, slots_;
};

}  // namespace sluice::core
