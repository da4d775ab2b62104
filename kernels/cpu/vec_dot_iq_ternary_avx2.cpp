// AVX2 dot products of the ternary types (TQ1_0, TQ2_0) and the IQ1 family (IQ1_S, IQ1_M) with
// Q8_K activations. The integer lanes and float steps are the scalar reference's
// (vec_dot_iquants.cpp), which follows ggml's AVX2 code; each super-block's weights are unpacked
// once for all NT activation rows.
#include <cmath>
#include <cstring>

#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/avx2_iq.h"
#include "kernels/cpu/blocks_iq.h"
#include "kernels/cpu/iq1_tables.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Per byte, mod 256: v * 3 and v * 9 (v * 8 by a 16-bit shift, bits crossing into the next
// byte masked off). Powers of 3 up to 81 are products of these.
inline __m256i mul3(__m256i v) { return _mm256_add_epi8(v, _mm256_add_epi8(v, v)); }
inline __m256i mul9(__m256i v) {
  return _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(v, 3), _mm256_set1_epi8(-8)), v);
}
inline __m128i mul3(__m128i v) { return _mm_add_epi8(v, _mm_add_epi8(v, v)); }
inline __m128i mul9(__m128i v) { return _mm_add_epi8(_mm_and_si128(_mm_slli_epi16(v, 3), _mm_set1_epi8(-8)), v); }

// Per byte: the ternary digit (q * 3) >> 8 (blocks_iq.h's ternary_digit), as ggml computes it
// without 16-bit products: with q' = max(q - 1, 0), the top 2 bits of avg(q', avg(q', 0)), which
// equal (q * 3) >> 8 for all 256 byte values.
inline __m256i top_digits(__m256i q) {
  const __m256i q1 = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
  const __m256i r = _mm256_avg_epu8(q1, _mm256_avg_epu8(q1, _mm256_setzero_si256()));
  return _mm256_and_si256(_mm256_srli_epi16(r, 6), _mm256_set1_epi8(3));
}

// The 256 digits (0..2) of a TQ1_0 block in value order, as eight 32-byte vectors.
inline void tq1_0_digits(const BlockTq1_0& x, __m256i d[8]) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));  // values 0..159: digit n of qs[m] is 32n + m
  const __m256i a3 = mul3(a), a9 = mul9(a);
  d[0] = top_digits(a);
  d[1] = top_digits(a3);
  d[2] = top_digits(a9);
  d[3] = top_digits(mul9(a3));
  d[4] = top_digits(mul9(a9));
  // Values 160..239: digit n of qs[32 + m] is 160 + 16n + m; 240..255: digit n of qh[j] is 240 + 4n + j.
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 32));
  const __m128i b3 = mul3(b), b9 = mul9(b);
  uint32_t qh32;
  std::memcpy(&qh32, x.qh, 4);
  const __m128i h = _mm_set1_epi32(int(qh32)), h3 = mul3(h);
  const __m128i hd = _mm_blend_epi32(_mm_blend_epi32(h, h3, 0b0010), _mm_blend_epi32(mul9(h), mul9(h3), 0b1000), 0b1100);
  d[5] = top_digits(_mm256_set_m128i(b3, b));
  d[6] = top_digits(_mm256_set_m128i(mul9(b3), b9));
  d[7] = top_digits(_mm256_set_m128i(hd, mul9(b9)));
}

inline void tq2_0_digits(const BlockTq2_0& x, __m256i d[8]) {
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int j = 0; j < 2; ++j) {
    const __m256i q = load32(x.qs + 32 * j);
    for (int l = 0; l < 4; ++l) d[4 * j + l] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), m3);
  }
}

// Digits times activations summed in int16 lanes (exact: |lane| <= 8 * 2 * 2 * 127), less Q8_K's
// 16-value sums lane by lane, then pairs of int16 lanes widened: ggml's lane layout.
template <class Block, void (*kDigits)(const Block&, __m256i*), int NT>
void ternary_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const Block*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i d[8];
    kDigits(x[i], d);
    const float xd = half_to_f32(x[i].d);
    for (int t = 0; t < NT; ++t) {
      __m256i s16 = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(d[g], load32(y[t][i].qs + 32 * g)));
      s16 = _mm256_sub_epi16(s16, load32(y[t][i].bsums));
      const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(s32), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

// Signed bytes x (here -1..1) times signed bytes y, pairs summed into int16.
inline __m256i mul_add_i8(__m256i x, __m256i y) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

inline __m256i iq1_grid4(int i0, int i1, int i2, int i3) {
  return _mm256_set_epi64x(int64_t(kIq1sGrid[i3]), int64_t(kIq1sGrid[i2]), int64_t(kIq1sGrid[i1]), int64_t(kIq1sGrid[i0]));
}

// kPanel: the IQ panel GEMM's order (scalar_iq.h) from the same integers: per super-block
// 8 * (grid sum) + (delta sum) into one float by one fma with (x.d / 8) * y.d.
template <int NT, bool kPanel = false>
void iq1_s_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockIq1S*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  __m256 acc[NT];
  float acc_delta[NT], acc_panel[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    acc_delta[t] = acc_panel[t] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i sumi[NT];
    int delta_sum[NT];
    for (int t = 0; t < NT; ++t) {
      sumi[t] = _mm256_setzero_si256();
      delta_sum[t] = 0;
    }
    for (int g = 0; g < 8; ++g) {
      const uint8_t* q = x[i].qs + 4 * g;
      const int h = x[i].qh[g];
      const __m256i grid = iq1_grid4(q[0] | ((h << 8) & 0x700), q[1] | ((h << 5) & 0x700), q[2] | ((h << 2) & 0x700),
                                     q[3] | ((h >> 1) & 0x700));
      const int ls = 2 * ((h >> 12) & 7) + 1;
      const int signed_ls = h & 0x8000 ? -ls : ls;
      const __m256i scale = _mm256_set1_epi16(int16_t(ls));
      for (int t = 0; t < NT; ++t) {
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(mul_add_i8(grid, load32(y[t][i].qs + 32 * g)), scale));
        delta_sum[t] += (y[t][i].bsums[2 * g] + y[t][i].bsums[2 * g + 1]) * signed_ls;
      }
    }
    const float xd = half_to_f32(x[i].d);
    for (int t = 0; t < NT; ++t) {
      if constexpr (kPanel) {
        const int32_t sum = 8 * hsum_i32(sumi[t]) + delta_sum[t];
        acc_panel[t] = std::fma(float(sum), xd * 0.125f * y[t][i].d, acc_panel[t]);
        continue;
      }
      const float d = y[t][i].d * xd;
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      acc_delta[t] = std::fma(d, float(delta_sum[t]), acc_delta[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = kPanel ? acc_panel[t] : std::fma(kIq1Delta, acc_delta[t], hsum(acc[t]));
}

template <int NT, bool kPanel = false>
void iq1_m_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockIq1M*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m256i one8 = _mm256_set1_epi8(1);
  __m256 acc[NT], acc_delta[NT];
  float acc_panel[NT] = {};
  for (int t = 0; t < NT; ++t) acc[t] = acc_delta[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, 8);
    __m256i sumi[NT], sumd[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = sumd[t] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const uint8_t* q = x[i].qs + 4 * g;
      const int h0 = x[i].qh[2 * g], h1 = x[i].qh[2 * g + 1];
      const __m256i grid = iq1_grid4(q[0] | ((h0 << 8) & 0x700), q[1] | ((h0 << 4) & 0x700), q[2] | ((h1 << 8) & 0x700),
                                     q[3] | ((h1 << 4) & 0x700));
      auto sign8 = [](int bit) { return int64_t(bit ? -1 : 0x0101010101010101); };
      const __m256i delta = _mm256_set_epi64x(sign8(h1 & 0x80), sign8(h1 & 0x08), sign8(h0 & 0x80), sign8(h0 & 0x08));
      const int shift = 6 * (g % 2);
      const int ls1 = 2 * ((sc[g / 2] >> shift) & 7) + 1, ls2 = 2 * ((sc[g / 2] >> (shift + 3)) & 7) + 1;
      const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(int16_t(ls2)), _mm_set1_epi16(int16_t(ls1)));
      for (int t = 0; t < NT; ++t) {
        const __m256i a = load32(y[t][i].qs + 32 * g);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(mul_add_i8(grid, a), scale));
        sumd[t] = _mm256_add_epi32(sumd[t], _mm256_madd_epi16(_mm256_maddubs_epi16(one8, _mm256_sign_epi8(a, delta)), scale));
      }
    }
    const float xd = half_to_f32(iq1_m_scale_bits(x[i]));
    for (int t = 0; t < NT; ++t) {
      if constexpr (kPanel) {
        const int32_t sum = 8 * hsum_i32(sumi[t]) + hsum_i32(sumd[t]);
        acc_panel[t] = std::fma(float(sum), xd * 0.125f * y[t][i].d, acc_panel[t]);
        continue;
      }
      const __m256 d = _mm256_set1_ps(y[t][i].d * xd);
      acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      acc_delta[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumd[t]), acc_delta[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = kPanel ? acc_panel[t] : std::fma(kIq1Delta, hsum(acc_delta[t]), hsum(acc[t]));
}

template <int NT>
void tq1_0_dots(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  ternary_dots<BlockTq1_0, tq1_0_digits, NT>(w, act, stride, n, out);
}
template <int NT>
void tq2_0_dots(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  ternary_dots<BlockTq2_0, tq2_0_digits, NT>(w, act, stride, n, out);
}

}  // namespace

#define SLUICE_IQ_ROWS(type)                                                                       \
  float vec_dot_##type(const void* w, const void* act, int64_t n) { return one_row<type##_dots<1>>(w, act, n); } \
  void vec_dot_##type##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    type##_dots<2>(w, act, stride, n, out);                                                        \
  }                                                                                                \
  void vec_dot_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    type##_dots<4>(w, act, stride, n, out);                                                        \
  }
SLUICE_IQ_ROWS(tq1_0)
SLUICE_IQ_ROWS(tq2_0)
SLUICE_IQ_ROWS(iq1_s)
SLUICE_IQ_ROWS(iq1_m)
#undef SLUICE_IQ_ROWS

float vec_dot_panel_iq1_s(const void* w, const void* act, int64_t n) {
  return one_row<iq1_s_dots<1, true>>(w, act, n);
}
void vec_dot_panel_iq1_s_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  iq1_s_dots<4, true>(w, act, stride, n, out);
}
float vec_dot_panel_iq1_m(const void* w, const void* act, int64_t n) {
  return one_row<iq1_m_dots<1, true>>(w, act, n);
}
void vec_dot_panel_iq1_m_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  iq1_m_dots<4, true>(w, act, stride, n, out);
}

}  // namespace sluice::kernels::cpu::avx2
