// AVX2 add_scaled_f16: each 8 F16 values are widened once (F16C) for all the outputs, then
// out[g] += weight[g] * v with the product and the sum rounded separately: the empty asm keeps
// the compiler from fusing them into an FMA (it may under -mfma), which would change the bits.
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx2 {

void add_scaled_f16(const uint16_t* v, int64_t n, const float* weight, float* const* out, int n_out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 value = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    for (int g = 0; g < n_out; ++g) {
      __m256 p = _mm256_mul_ps(_mm256_set1_ps(weight[g]), value);
      asm("" : "+x"(p));
      _mm256_storeu_ps(out[g] + i, _mm256_add_ps(_mm256_loadu_ps(out[g] + i), p));
    }
  }
  for (; i < n; ++i) {
    const float value = half_to_f32(v[i]);
    for (int g = 0; g < n_out; ++g) {
      float p = weight[g] * value;
      asm("" : "+x"(p));
      out[g][i] += p;
    }
  }
}

}  // namespace sluice::kernels::cpu::avx2
