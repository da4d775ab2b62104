// dot_f16_rows for the avx512_vnni table: AVX2's 256-bit arithmetic (dot_f16_rows_impl.h), four
// heads per pass in the 32 registers AVX-512 VL gives.
#include "kernels/cpu/avx512_common.h"

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"

namespace sluice::kernels::cpu::avx512 {
using avx2::vec_dot_f16;
#include "kernels/cpu/dot_f16_rows_impl.h"

void dot_f16_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                  int n_q, float* const* out) {
  dot_f16_rows_impl<4>(rows, row_stride, n_rows, n, q, n_q, out);
}

}  // namespace sluice::kernels::cpu::avx512
