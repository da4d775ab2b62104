#include "core/kimi_k3/kimi_k3_state.h"

#include <algorithm>

#include "common/error.h"
#include "common/units.h"

namespace sluice::core {

KimiK3State::KimiK3State(const KimiK3Config& c, int64_t n_ctx, GgmlType kv_type)
    : n_ctx_(n_ctx), kv_type_(kv_type), conv_floats_(c.conv_state_floats()) {
  if (kv_type != GgmlType::F32 && kv_type != GgmlType::F16)
    throw Error(ErrorCode::invalid_argument, "KV cache type '" + std::string(ggml_type_name(kv_type)) +
                                                 "' is not supported (f32 or f16)");
  if (n_ctx <= 0) throw Error(ErrorCode::invalid_argument, "context length " + std::to_string(n_ctx) + " must be > 0");
  per_kda_ = conv_floats_ + c.ssm_state_floats();
  row_bytes_ = static_cast<size_t>(c.mla_row()) * (kv_type == GgmlType::F16 ? 2 : 4);
  int64_t n_kda = 0, n_mla = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) slot_.push_back(c.is_kda(il) ? n_kda++ : n_mla++);
  recurrent_.resize(checked_mul(static_cast<uint64_t>(n_kda), static_cast<uint64_t>(per_kda_), "KDA state floats"));
  kv_.resize(checked_mul(checked_mul(static_cast<uint64_t>(n_mla), static_cast<uint64_t>(n_ctx), "MLA cache rows"),
                         row_bytes_, "MLA cache bytes"));
}

uint64_t KimiK3State::recurrent_bytes_for(const KimiK3Config& c) {
  const uint64_t per = static_cast<uint64_t>(c.conv_state_floats() + c.ssm_state_floats());
  return checked_mul(checked_mul(static_cast<uint64_t>(c.n_kda_layers()), per, "KDA state floats"), sizeof(float),
                     "KDA state bytes");
}

uint64_t KimiK3State::kv_bytes_for(const KimiK3Config& c, int64_t n_ctx, GgmlType kv_type) {
  const uint64_t row = static_cast<uint64_t>(c.mla_row()) * (kv_type == GgmlType::F16 ? 2 : 4);
  return checked_mul(checked_mul(static_cast<uint64_t>(c.n_mla_layers()), static_cast<uint64_t>(std::max<int64_t>(n_ctx, 0)),
                                 "MLA cache rows"),
                     row, "MLA cache bytes");
}

void KimiK3State::reset() { std::fill(recurrent_.begin(), recurrent_.end(), 0.0f); }

}  // namespace sluice::core
