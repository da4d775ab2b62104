// Scalar reference of add_scaled_f16: out[g][i] += weight[g][j] * v_j[i] over F16 rows, j in order.
// Built without -mfma, so each product and each sum are rounded separately, as in attention's
// original `o[i] += w * v[i]` loop that the SIMD version must reproduce.
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

void add_scaled_f16(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                    const float* const* weight, float* const* out, int n_out) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const auto* v = reinterpret_cast<const uint16_t*>(rows + size_t(j) * row_stride);
    for (int64_t i = 0; i < n; ++i) {
      const float value = fp16_to_f32(v[i]);
      for (int g = 0; g < n_out; ++g) {
        const float p = weight[g][j] * value;
        out[g][i] += p;
      }
    }
  }
}

}  // namespace sluice::kernels::cpu
