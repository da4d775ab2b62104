// AVX2 dot products of the float formats: widen to f32, four independent FMA accumulators
// (32 values per step) to hide FMA latency, scalar tail.
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 load_bf16(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Shared loop: Load converts 8 stored values to f32; Widen converts one for the tail.
template <class T, class Load, class Widen>
float dot(const T* x, const T* y, int64_t n, Load load, Widen widen) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(load(x + i + 8 * k), load(y + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load(x + i), load(y + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += widen(x[i]) * widen(y[i]);
  return sum;
}

}  // namespace

float vec_dot_f32(const void* w, const void* act, int64_t n) {
  return dot(
      static_cast<const float*>(w), static_cast<const float*>(act), n,
      [](const float* p) { return _mm256_loadu_ps(p); }, [](float v) { return v; });
}

float vec_dot_f16(const void* w, const void* act, int64_t n) {
  return dot(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(act), n, load_f16, fp16_to_f32);
}

float vec_dot_bf16(const void* w, const void* act, int64_t n) {
  return dot(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(act), n, load_bf16, bf16_to_f32);
}

}  // namespace sluice::kernels::cpu::avx2
