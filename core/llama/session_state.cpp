// LlamaSession's sequence-state stream: KV rows read and written in place (core/arch/session.h).
#include <string>

#include "common/error.h"
#include "core/llama/session.h"

namespace sluice::core {

SequenceStateShape LlamaSession::state_shape() const {
  const KvCache& kv = kv_[0];
  return {.kv_type = kv.type(),
          .fixed_bytes = 0,
          .bytes_per_token = (kv.k_row_bytes() + kv.v_row_bytes()) * static_cast<uint64_t>(config().n_layer)};
}

void LlamaSession::save_state(int64_t n_tokens, StateSink& sink) const {
  if (n_tokens < 1 || n_tokens > n_ctx())
    throw Error(ErrorCode::invalid_argument, "save_state: " + std::to_string(n_tokens) +
                                                 " tokens is outside the context [1, " + std::to_string(n_ctx()) + "]");
  const KvCache& kv = kv_[0];
  const size_t n = static_cast<size_t>(n_tokens);
  // Rows of one layer are consecutive by position: [0, n) is one span per K and per V.
  for (int64_t il = 0; il < config().n_layer; ++il) {
    sink.write({kv.k(il, 0), n * kv.k_row_bytes()});
    if (kv.v_row_bytes()) sink.write({kv.v(il, 0), n * kv.v_row_bytes()});
  }
}

void LlamaSession::load_state(int64_t n_saved, int64_t n_keep, StateSource& source) {
  check_state_tokens(n_saved, n_keep, n_ctx(), can_rewind());
  KvCache& kv = kv_[0];
  const size_t keep = static_cast<size_t>(n_keep), drop = static_cast<size_t>(n_saved - n_keep);
  for (int64_t il = 0; il < config().n_layer; ++il) {
    source.read({kv.k(il, 0), keep * kv.k_row_bytes()});
    source.skip(drop * kv.k_row_bytes());
    if (!kv.v_row_bytes()) continue;
    source.read({kv.v(il, 0), keep * kv.v_row_bytes()});
    source.skip(drop * kv.v_row_bytes());
  }
}

}  // namespace sluice::core
