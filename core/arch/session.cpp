// The shared messages of Session: logits rows and sequence-state token counts.
#include "core/arch/session.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/units.h"

namespace sluice::core {

void check_logit_rows(int64_t wanted, int64_t kept) {
  if (wanted <= kept) return;
  throw Error(ErrorCode::invalid_argument,
              "a forward call asked for " + std::to_string(wanted) + " logits rows, but this session keeps " +
                  std::to_string(kept) + " (SessionOptions::n_logit_rows: every prompt row needs 0, the batch)");
}

uint64_t SequenceStateShape::bytes(int64_t n_tokens) const {
  const uint64_t rows = checked_mul(bytes_per_token, static_cast<uint64_t>(std::max<int64_t>(n_tokens, 0)), "sequence state bytes");
  if (rows > UINT64_MAX - fixed_bytes)
    throw Error(ErrorCode::invalid_argument, "sequence state of " + std::to_string(n_tokens) + " tokens overflows 64 bits");
  return fixed_bytes + rows;
}

void check_state_tokens(int64_t n_saved, int64_t n_keep, int64_t n_ctx, bool can_rewind) {
  if (n_keep < 1 || n_keep > n_saved || n_keep > n_ctx)
    throw Error(ErrorCode::invalid_argument, "sequence state: keeping " + std::to_string(n_keep) + " of " +
                                                 std::to_string(n_saved) + " saved tokens in a context of " +
                                                 std::to_string(n_ctx) + " (need 1 <= kept <= min(saved, context))");
  if (!can_rewind && n_keep != n_saved)
    throw Error(ErrorCode::invalid_argument, "sequence state: a recurrent state holds exactly " + std::to_string(n_saved) +
                                                 " tokens and cannot be cut to " + std::to_string(n_keep));
}

}  // namespace sluice::core
