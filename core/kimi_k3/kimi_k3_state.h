// KimiK3State: everything a `kimi-k3` sequence carries from one forward() call to the next,
// allocated once at construction from the config and the context length; nothing per token.
//
//   per KDA layer (recurrent state, fixed size, llama.cpp n_embd_r() + n_embd_s()):
//     conv  [3][d_inner][d_conv - 1] f32   the last d_conv-1 projected q|k|v inputs (pre-conv),
//                                          per channel oldest first
//     S     [n_head][d_h][d_h] f32         delta-rule state, transposed: S_h[i][j] at h*D*D+j*D+i
//   per MLA layer (grows with context, sized for n_ctx):
//     KV    [n_ctx][kv_lora + qk_rope]     one row [c | k_pe] per position, F32 or F16; the values
//                                          are a view of the first kv_lora entries (no V copy)
// The cross-layer residual stack is not state: it lives one forward pass (session scratch).
//
// Real Kimi K3: 69 KDA layers x (110,592 + 1,572,864) floats = 0.43 GiB of recurrent state, plus
// 24 x 576 values per position of MLA cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/ggml_type.h"
#include "core/kimi_k3/kimi_k3_config.h"

namespace sluice::core {

class KimiK3State {
 public:
  // Error(invalid_argument) for a KV type other than F32/F16 or a non-positive n_ctx.
  KimiK3State(const KimiK3Config& config, int64_t n_ctx, GgmlType kv_type);

  // What a state for (config, n_ctx, kv_type) will allocate, before allocating it (for budget
  // reservation): recurrent bytes + KV bytes.
  static uint64_t recurrent_bytes_for(const KimiK3Config& config);
  static uint64_t kv_bytes_for(const KimiK3Config& config, int64_t n_ctx, GgmlType kv_type);

  int64_t n_ctx() const { return n_ctx_; }
  GgmlType kv_type() const { return kv_type_; }

  float* conv(int64_t il) { return recurrent_.data() + slot(il) * per_kda_; }
  float* ssm(int64_t il) { return conv(il) + conv_floats_; }
  // One cached MLA row of layer il at position pos (kv_lora + qk_rope values of kv_type).
  std::byte* kv_row(int64_t il, int64_t pos) {
    return kv_.data() + (static_cast<size_t>(slot(il)) * static_cast<size_t>(n_ctx_) + static_cast<size_t>(pos)) * row_bytes_;
  }
  size_t kv_row_bytes() const { return row_bytes_; }
  const std::byte* kv_row(int64_t il, int64_t pos) const {
    return kv_.data() + (static_cast<size_t>(slot(il)) * static_cast<size_t>(n_ctx_) + static_cast<size_t>(pos)) * row_bytes_;
  }
  // Every KDA layer's conv + delta-rule floats, layer after layer (the whole recurrent state).
  std::span<float> recurrent() { return recurrent_; }
  std::span<const float> recurrent() const { return recurrent_; }

  uint64_t recurrent_bytes() const { return recurrent_.size() * sizeof(float); }
  uint64_t kv_bytes() const { return kv_.size(); }
  uint64_t bytes() const { return recurrent_bytes() + kv_bytes(); }

  // A new sequence: zero conv and delta-rule state (the KV rows are overwritten before use).
  void reset();

 private:
  int64_t slot(int64_t il) const { return slot_[static_cast<size_t>(il)]; }
  int64_t n_ctx_;
  GgmlType kv_type_;
  int64_t conv_floats_;
  int64_t per_kda_;
  size_t row_bytes_;
  std::vector<int64_t> slot_;  // layer -> index among KDA layers or among MLA layers
  std::vector<float> recurrent_;
  std::vector<std::byte> kv_;
};

}  // namespace sluice::core
