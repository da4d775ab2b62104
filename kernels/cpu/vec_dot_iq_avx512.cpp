// AVX-512 (BW + VNNI) dot products of i-quants with Q8_K activations: IQ4_XS.
//
// The AVX2 grid_dots order (vec_dot_iq_grid_avx2.cpp): per 32-value group, |value| times the
// activation with the value's sign moved onto it (one maddubs), weighted by the group's int16
// scale into 8 int32 lanes, one fma per super-block. Here two groups share one 512-bit vector: the
// 4-bit lookups of both are one vpshufb, the sign move is a masked negate (no 512-bit vpsignb), and
// vpdpwssd weights and adds. The halves are folded into the AVX2 lanes (exact) before the float
// steps, so every result is the AVX2 (and scalar) result to the bit.
#include "kernels/cpu/avx512_common.h"  // first: its warning pragma must precede <immintrin.h>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/blocks_iq.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

template <int NT>
void iq4_xs_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockIq4Xs*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m512i values = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
  // 128-bit lanes 0..3 <- 64-bit words 0,1 | 0,1 | 2,3 | 2,3: group g's 16 bytes twice, then g+1's.
  const __m512i twice = _mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0);
  const __m512i nibble_shift = quarters16(0, 4, 0, 4);  // low nibbles (values 0..15), then high
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
    for (int g = 0; g < 8; g += 2) {
      const __m512i bits = _mm512_permutexvar_epi64(
          twice, _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 16 * g))));
      const __m512i v = _mm512_shuffle_epi8(values, _mm512_and_si512(_mm512_srlv_epi16(bits, nibble_shift), low4));
      const __m512i mag = _mm512_abs_epi8(v);
      const __mmask64 neg = _mm512_movepi8_mask(v);
      const __m512i scale = halves16(iq4_xs_scale(x[i], g), iq4_xs_scale(x[i], g + 1));
      for (int t = 0; t < NT; ++t) {
        const __m512i a = negate_where(load64(y[t][i].qs + 32 * g), neg);
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(mag, a), scale);
      }
    }
    const float xd = half_to_f32(x[i].d);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y[t][i].d), _mm256_cvtepi32_ps(fold(sumi[t])), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = 1.0f * hsum(acc[t]);  // the AVX2 kernel's kFactor, 1 here
}

}  // namespace

float vec_dot_iq4_xs(const void* w, const void* act, int64_t n) { return one_row<iq4_xs_dots<1>>(w, act, n); }
void vec_dot_iq4_xs_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  iq4_xs_dots<2>(w, act, stride, n, out);
}
void vec_dot_iq4_xs_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  iq4_xs_dots<4>(w, act, stride, n, out);
}
void vec_dot_iq4_xs_x8(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  iq4_xs_dots<8>(w, act, stride, n, out);
}

}  // namespace sluice::kernels::cpu::avx512
