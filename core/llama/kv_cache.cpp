#include "core/llama/kv_cache.h"

#include <algorithm>

#include "common/error.h"
#include "common/units.h"
#include "kernels/quant.h"

namespace sluice::core {

KvCache::KvCache(const ModelConfig& c, GgmlType type, int64_t n_ctx)
    : type_(type), n_ctx_(n_ctx), k_row_(c.k_row()), v_row_(c.v_row()) {
  if (type != GgmlType::F16 && type != GgmlType::F32)
    throw Error(ErrorCode::invalid_argument,
                "KV cache type '" + std::string(ggml_type_name(type)) + "' is not supported (f16, f32)");
  if (n_ctx <= 0) throw Error(ErrorCode::invalid_argument, "context length " + std::to_string(n_ctx) + " must be positive");
  const uint64_t row = k_row_bytes() + v_row_bytes();
  layer_bytes_ = checked_mul(row, static_cast<uint64_t>(n_ctx), "KV cache layer bytes");
  data_.resize(checked_mul(layer_bytes_, static_cast<uint64_t>(c.n_layer), "KV cache bytes"));
}

uint64_t KvCache::bytes_for(const ModelConfig& c, GgmlType type, int64_t n_ctx) {
  const uint64_t elem = type == GgmlType::F16 ? 2 : 4;
  const uint64_t row = (static_cast<uint64_t>(c.k_row()) + static_cast<uint64_t>(c.v_row())) * elem;
  return checked_mul(checked_mul(row, static_cast<uint64_t>(std::max<int64_t>(n_ctx, 0)), "KV cache layer bytes"),
                     static_cast<uint64_t>(c.n_layer), "KV cache bytes");
}

void KvCache::store(const float* src, std::byte* dst, int64_t n) const {
  kernels::quantize_row(type_, src, dst, n);
}

}  // namespace sluice::core
