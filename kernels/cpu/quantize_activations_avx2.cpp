// AVX2 activation quantization. Bit-identical to quantize_activations.cpp: the same f32
// products and the same round-half-to-even (_mm256_round_ps), only eight at a time.
#include <cmath>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256i round_to_i32(__m256 v) {
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Four vectors of 8 int32 (values in int8 range) -> 32 int8 in order.
inline __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);
  // pack works per 128-bit lane; restore element order.
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One 32-value block at x: qs = round(x * id); returns the sum of qs (for Q8_1).
inline int quantize_32(const float* x, float id, int8_t* qs) {
  const __m256 mul = _mm256_set1_ps(id);
  const __m256i i0 = round_to_i32(_mm256_mul_ps(_mm256_loadu_ps(x + 0), mul));
  const __m256i i1 = round_to_i32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), mul));
  const __m256i i2 = round_to_i32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), mul));
  const __m256i i3 = round_to_i32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), mul));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32_to_i8(i0, i1, i2, i3));
  return hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
}

inline float amax_32(const float* x) {
  __m256 m = abs_ps(_mm256_loadu_ps(x));
  m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8)));
  m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 16)));
  m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 24)));
  return hmax(m);
}

}  // namespace

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float amax = amax_32(src);
    y[i].d = f32_to_fp16(amax / 127.0f);
    quantize_32(src, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
  }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float amax = amax_32(src);
    const float d = amax / 127.0f;
    const int sum = quantize_32(src, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
    y[i].d = f32_to_fp16(d);
    y[i].s = f32_to_fp16(d * float(sum));
  }
}

void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(src + j)));
    const float amax = hmax(m);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The scale's sign comes from the first value of largest magnitude, as in the scalar code.
    int first = 0;
    // Bounded: with a NaN in the block amax may match nothing (garbage out, but no overrun).
    while (first < kQK_K - 1 && std::fabs(src[first]) != amax) ++first;
    const float iscale = -127.0f / src[first];
    const __m256 mul = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < kQK_K; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm256_min_epi32(round_to_i32(_mm256_mul_ps(_mm256_loadu_ps(src + j + 8 * k), mul)), cap);
      const __m256i packed = pack_i32_to_i8(q[0], q[1], q[2], q[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), packed);
      // Sums of 16: widen to int16 and add pairs until one sum per 16 bytes remains.
      const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(packed));
      const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(packed, 1));
      y[i].bsums[j / 16] = int16_t(hsum_i32(sum_pairs_i16(lo)));
      y[i].bsums[j / 16 + 1] = int16_t(hsum_i32(sum_pairs_i16(hi)));
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = f32_to_fp16(src[i]);
}

}  // namespace sluice::kernels::cpu::avx2
