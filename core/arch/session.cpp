// The one message for a forward call that asks for more logits rows than its session keeps.
#include "core/arch/session.h"

#include <string>

#include "common/error.h"

namespace sluice::core {

void check_logit_rows(int64_t wanted, int64_t kept) {
  if (wanted <= kept) return;
  throw Error(ErrorCode::invalid_argument,
              "a forward call asked for " + std::to_string(wanted) + " logits rows, but this session keeps " +
                  std::to_string(kept) + " (SessionOptions::n_logit_rows: every prompt row needs 0, the batch)");
}

}  // namespace sluice::core
