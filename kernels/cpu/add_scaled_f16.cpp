// Scalar reference of add_scaled_f16: out[g][i] += weight[g] * v[i] over an F16 row.
// Built without -mfma, so the product and the sum are rounded separately, as in attention's
// original `o[i] += w * v[i]` loop that the SIMD version must reproduce.
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

void add_scaled_f16(const uint16_t* v, int64_t n, const float* weight, float* const* out, int n_out) {
  for (int64_t i = 0; i < n; ++i) {
    const float value = fp16_to_f32(v[i]);
    for (int g = 0; g < n_out; ++g) {
      const float p = weight[g] * value;
      out[g][i] += p;
    }
  }
}

}  // namespace sluice::kernels::cpu
