// KimiK3Session's sequence-state stream: recurrent state and MLA rows read and written in place
// (core/arch/session.h).
#include <string>

#include "common/error.h"
#include "core/kimi_k3/kimi_k3_session.h"

namespace sluice::core {

SequenceStateShape KimiK3Session::state_shape() const {
  const KimiK3State& st = states_[0];
  return {.kv_type = st.kv_type(),
          .fixed_bytes = st.recurrent_bytes(),
          .bytes_per_token = st.kv_row_bytes() * static_cast<uint64_t>(config().n_mla_layers())};
}

void KimiK3Session::save_state(int64_t n_tokens, StateSink& sink) const {
  if (n_tokens < 1 || n_tokens != n_past_[0])
    throw Error(ErrorCode::invalid_argument, "save_state: the kimi-k3 state holds " + std::to_string(n_past_[0]) +
                                                 " tokens, not " + std::to_string(n_tokens) +
                                                 " (a recurrent state is saved at exactly its length)");
  const KimiK3State& st = states_[0];
  const std::span<const float> rec = st.recurrent();
  sink.write(std::as_bytes(rec));
  const size_t n = static_cast<size_t>(n_tokens);
  for (int64_t il = 0; il < config().n_layer; ++il)
    if (!config().is_kda(il)) sink.write({st.kv_row(il, 0), n * st.kv_row_bytes()});
}

void KimiK3Session::load_state(int64_t n_saved, int64_t n_keep, StateSource& source) {
  check_state_tokens(n_saved, n_keep, n_ctx(), can_rewind());
  n_past_[0] = 0;  // until the whole stream is in: a failed load restarts at 0
  KimiK3State& st = states_[0];
  source.read(std::as_writable_bytes(st.recurrent()));
  const size_t n = static_cast<size_t>(n_keep);
  for (int64_t il = 0; il < config().n_layer; ++il)
    if (!config().is_kda(il)) source.read({st.kv_row(il, 0), n * st.kv_row_bytes()});
  n_past_[0] = n_keep;
}

}  // namespace sluice::core
