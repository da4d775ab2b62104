// AVX-512 (BW + VNNI) dot products of i-quants with Q8_K activations: IQ4_XS and TQ2_0.
//
// Each follows its AVX2 kernel's order (vec_dot_iq_grid_avx2.cpp, vec_dot_iq_ternary_avx2.cpp)
// with two 32-value groups per 512-bit vector; the halves are folded into the AVX2 lanes (exact)
// before the float steps, so every result is the AVX2 (and scalar) result to the bit.
#include "kernels/cpu/avx512_common.h"  // first: its warning pragma must precede <immintrin.h>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/blocks_iq.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

// IQ4_XS: per group, |value| times the activation with the value's sign moved onto it (one
// maddubs), weighted by the group's int16 scale into 8 int32 lanes, one fma per super-block. The
// 4-bit lookups of two groups are one vpshufb, the sign move a masked negate (no 512-bit vpsignb),
// and vpdpwssd weights and adds.
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

// TQ2_0: digits 0..2 (value + 1). The AVX2 kernel sums digit x activation in int16 lanes, takes
// Q8_K's 16-value sums off lane by lane and widens pairs: int32 lane k ends as the products of
// bytes 4k..4k+3 of every group less bsums[2k] + bsums[2k+1] (no int16 lane can wrap: |lane| <=
// 8 * 2 * 2 * 127). vpdpbusd adds the same products straight into int32 lanes, and the bsums pairs
// come off after the fold, so the lanes end with the same integers.
template <int NT>
void tq2_0_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockTq2_0*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    // Groups 4j + l hold bits 2l of qs[32j ..]: pairs (l = 0, 1) and (2, 3) of each j.
    __m512i d[4];
    for (int j = 0; j < 2; ++j) {
      const __m512i q = broadcast32(x[i].qs + 32 * j);
      d[2 * j] = _mm512_and_si512(_mm512_srlv_epi16(q, halves16(0, 2)), m3);
      d[2 * j + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, halves16(4, 6)), m3);
    }
    const float xd = half_to_f32(x[i].d);
    for (int t = 0; t < NT; ++t) {
      __m512i s = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) s = _mm512_dpbusd_epi32(s, d[p], load64(y[t][i].qs + 64 * p));
      const __m256i bsum_pairs =
          _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[t][i].bsums)), ones16);
      const __m256i s32 = _mm256_sub_epi32(fold(s), bsum_pairs);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(s32), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

}  // namespace

float vec_dot_tq2_0(const void* w, const void* act, int64_t n) { return one_row<tq2_0_dots<1>>(w, act, n); }
void vec_dot_tq2_0_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  tq2_0_dots<2>(w, act, stride, n, out);
}
void vec_dot_tq2_0_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  tq2_0_dots<4>(w, act, stride, n, out);
}
void vec_dot_tq2_0_x8(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  tq2_0_dots<8>(w, act, stride, n, out);
}

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
