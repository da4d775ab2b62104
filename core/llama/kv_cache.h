// KvCache: keys and values of every layer for positions [0, n_ctx), in F16 (default) or F32.
//
// Layout per layer, row-major by position:
//   K [n_ctx][k_row]   GQA: k_row = n_head_kv * head_dim_k (heads back to back)
//                      MLA: k_row = kv_lora + qk_rope: [normalized kv latent | rope part], as
//                           llama.cpp's absorbed MLA concatenates it (latent first); the score dot
//                           sums in this order, so it decides the logits' last bits
//   V [n_ctx][v_row]   GQA: v_row = n_head_kv * head_dim_v; MLA: none, the values are the kv
//                      latent, the first kv_lora values of the K row (llama.cpp keeps a second
//                      copy; the numbers are the same, the memory is not)
// Values are rounded to the cache type when stored, exactly as ggml's copy into its cache does.
// Allocated once at construction; nothing is allocated afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/ggml_type.h"
#include "core/llama/model_config.h"

namespace sluice::core {

class KvCache {
 public:
  // Error(invalid_argument) for a type other than F16/F32 or a non-positive n_ctx.
  KvCache(const ModelConfig& config, GgmlType type, int64_t n_ctx);

  // bytes() of a cache with these parameters, without allocating it.
  static uint64_t bytes_for(const ModelConfig& config, GgmlType type, int64_t n_ctx);

  GgmlType type() const { return type_; }
  int64_t n_ctx() const { return n_ctx_; }
  size_t elem_bytes() const { return type_ == GgmlType::F16 ? 2 : 4; }
  size_t k_row_bytes() const { return static_cast<size_t>(k_row_) * elem_bytes(); }
  size_t v_row_bytes() const { return static_cast<size_t>(v_row_) * elem_bytes(); }
  uint64_t bytes() const { return data_.size(); }

  std::byte* k(int64_t layer, int64_t pos) { return data_.data() + k_offset(layer, pos); }
  const std::byte* k(int64_t layer, int64_t pos) const { return data_.data() + k_offset(layer, pos); }
  std::byte* v(int64_t layer, int64_t pos) { return data_.data() + v_offset(layer, pos); }
  const std::byte* v(int64_t layer, int64_t pos) const { return data_.data() + v_offset(layer, pos); }

  // Rounds n floats to the cache type into dst.
  void store(const float* src, std::byte* dst, int64_t n) const;

 private:
  size_t k_offset(int64_t layer, int64_t pos) const {
    return static_cast<size_t>(layer) * layer_bytes_ + static_cast<size_t>(pos) * k_row_bytes();
  }
  size_t v_offset(int64_t layer, int64_t pos) const {
    return static_cast<size_t>(layer) * layer_bytes_ + static_cast<size_t>(n_ctx_) * k_row_bytes() +
           static_cast<size_t>(pos) * v_row_bytes();
  }
  GgmlType type_;
  int64_t n_ctx_;
  int64_t k_row_;
  int64_t v_row_;
  size_t layer_bytes_ = 0;
  std::vector<std::byte> data_;
};

}  // namespace sluice::core
