// AVX2 dequantization of F16 rows (attention reads F16 K/V rows through dequantize_row).
// F16C widening is exact, so the result is bit-identical to the scalar reference.
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx2 {

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) dst[i] = half_to_f32(x[i]);
}

}  // namespace sluice::kernels::cpu::avx2
