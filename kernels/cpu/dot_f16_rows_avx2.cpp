// dot_f16_rows for the avx2 table: two heads per pass (see dot_f16_rows_impl.h).
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"

namespace sluice::kernels::cpu::avx2 {
#include "kernels/cpu/dot_f16_rows_impl.h"

void dot_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                  int n_q, float* const* out) {
  dot_f16_rows_impl<2>(rows, row_stride, n_rows, n, q, n_q, out);
}

}  // namespace sluice::kernels::cpu::avx2
