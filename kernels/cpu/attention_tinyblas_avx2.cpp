// The avx2 level's tinyBLAS-order attention products: attention_tinyblas_impl.h built with
// -mavx2 -mfma -mf16c, where std::fma is one instruction and F16C widens 8 values at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels::cpu::avx2 {

namespace {
void widen_f16(const uint16_t* src, float* dst, int64_t m) {
  int64_t i = 0;
  for (; i + 8 <= m; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < m; ++i) dst[i] = half_to_f32(src[i]);
}
}  // namespace

#include "kernels/cpu/attention_tinyblas_impl.h"

}  // namespace sluice::kernels::cpu::avx2
