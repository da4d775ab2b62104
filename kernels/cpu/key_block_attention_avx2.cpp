// The key-block attention kernels' AVX2 level: the plain bodies (key_block_attention_impl.h) built
// with -mavx2 -mfma -mf16c, where the 16-lane loops vectorize and each std::fma is one instruction.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels::cpu::avx2 {
namespace {
inline void widen16(const uint16_t* src, float* dst) {
  _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
  _mm256_storeu_ps(dst + 8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8))));
}
inline void narrow16(const float* src, uint16_t* dst) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 8),
                   _mm256_cvtps_ph(_mm256_loadu_ps(src + 8), _MM_FROUND_TO_NEAREST_INT));
}
#include "kernels/cpu/key_block_attention_impl.h"
}  // namespace

KeyBlockKernels key_block_kernels() {
  return {decompress_key_blocks_impl, decompress_value_rows_impl, key_block_scores_impl, softmax_chunk_impl,
          add_weighted_value_rows_impl};
}

}  // namespace sluice::kernels::cpu::avx2
