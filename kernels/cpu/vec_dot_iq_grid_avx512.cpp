// AVX-512 (BW + VNNI) dot products of the codebook i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) with Q8_K activations.
//
// The AVX2 grid_dots order (vec_dot_iq_grid_avx2.cpp), two 32-value groups per 512-bit vector: the
// codebook magnitudes of both groups, their signs as one 64-bit mask (the AVX2 kernel's +-1 bytes
// are this mask spread out), and int16 scales per 16 values. Each row takes one masked negate, one
// maddubs and one vpdpwssd per 64 values; the halves are folded into the AVX2 lanes (exact) before
// the float steps, so every result is the AVX2 (and scalar) result to the bit.
#include "kernels/cpu/avx512_common.h"  // first: its warning pragma must precede <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/blocks_iq.h"
#include "kernels/cpu/iq2_tables.h"
#include "kernels/cpu/iq3_tables.h"
#include "kernels/cpu/iq_sign_tables.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

struct Pair {
  __m512i mag;     // 64 unsigned magnitudes: group g, then group g + 1
  __mmask64 neg;   // bit l set: value l is negative
  __m512i scale;   // 32 int16, eight per 16 values
};

inline __m512i u64x8(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t b0, uint64_t b1, uint64_t b2,
                     uint64_t b3) {
  return _mm512_set_epi64(int64_t(b3), int64_t(b2), int64_t(b1), int64_t(b0), int64_t(a3), int64_t(a2), int64_t(a1),
                          int64_t(a0));
}

// Four 7-bit stored signs (parity completes each to 8) -> 32 sign bits.
inline uint64_t signs7x4(uint32_t packed) {
  return uint64_t(kSignsIq2xs[packed & 127]) | uint64_t(kSignsIq2xs[(packed >> 7) & 127]) << 8 |
         uint64_t(kSignsIq2xs[(packed >> 14) & 127]) << 16 | uint64_t(kSignsIq2xs[(packed >> 21) & 127]) << 24;
}

// Two 4-bit scales per 32 values (values 0..15, 16..31) of groups g and g + 1, as 2s + 1.
inline __m512i nibble_scales(uint8_t s0, uint8_t s1) {
  return quarters16(2 * (s0 & 0xf) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 0xf) + 1, 2 * (s1 >> 4) + 1);
}

struct Iq2Xxs {
  using Block = BlockIq2Xxs;
  static constexpr float kFactor = 0.125f;
  static Pair pair(const Block& x, int g) {
    uint32_t a[4];
    std::memcpy(a, x.qs + 4 * g, 16);
    auto e = [](uint32_t idx, int k) { return kIq2xxsGrid[(idx >> (8 * k)) & 0xff]; };
    return {u64x8(e(a[0], 0), e(a[0], 1), e(a[0], 2), e(a[0], 3), e(a[2], 0), e(a[2], 1), e(a[2], 2), e(a[2], 3)),
            __mmask64(signs7x4(a[1]) | signs7x4(a[3]) << 32),
            halves16(2 * int(a[1] >> 28) + 1, 2 * int(a[3] >> 28) + 1)};
  }
};

struct Iq2Xs {
  using Block = BlockIq2Xs;
  static constexpr float kFactor = 0.125f;
  static Pair pair(const Block& x, int g) {
    const uint16_t* q = x.qs + 4 * g;
    auto e = [q](int k) { return kIq2xsGrid[q[k] & 511]; };
    uint64_t neg = 0;
    for (int k = 0; k < 8; ++k) neg |= uint64_t(kSignsIq2xs[q[k] >> 9]) << (8 * k);
    return {u64x8(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7)), __mmask64(neg),
            nibble_scales(x.scales[g], x.scales[g + 1])};
  }
};

struct Iq2S {
  using Block = BlockIq2S;
  static constexpr float kFactor = 0.125f;
  static Pair pair(const Block& x, int g) {
    const uint8_t* q = x.qs + 4 * g;
    auto e = [&](int k) {
      const int h = x.qh[g + k / 4], j = k % 4;
      return kIq2sGrid[q[k] | ((h << (8 - 2 * j)) & 0x300)];
    };
    uint64_t neg;
    std::memcpy(&neg, x.qs + kQK_K / 8 + 4 * g, 8);
    return {u64x8(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7)), __mmask64(neg),
            nibble_scales(x.scales[g], x.scales[g + 1])};
  }
};

struct Iq3Xxs {
  using Block = BlockIq3Xxs;
  static constexpr float kFactor = 0.25f;
  static Pair pair(const Block& x, int g) {
    const uint8_t* q = x.qs + 8 * g;
    uint32_t aux[2];
    std::memcpy(aux, x.qs + kQK_K / 4 + 4 * g, 8);
    auto e = [q](int j) { return int(kIq3xxsGrid[q[j]]); };
    return {_mm512_set_epi32(e(15), e(14), e(13), e(12), e(11), e(10), e(9), e(8), e(7), e(6), e(5), e(4), e(3), e(2),
                             e(1), e(0)),
            __mmask64(signs7x4(aux[0]) | signs7x4(aux[1]) << 32),
            halves16(2 * int(aux[0] >> 28) + 1, 2 * int(aux[1] >> 28) + 1)};
  }
};

struct Iq3S {
  using Block = BlockIq3S;
  static constexpr float kFactor = 1.0f;
  static Pair pair(const Block& x, int g) {
    const uint8_t* q = x.qs + 8 * g;
    auto e = [&](int k) {
      const int h = x.qh[g + k / 8], j = k % 8;
      return int(kIq3sGrid[q[k] | ((h << (8 - j)) & 256)]);
    };
    uint64_t neg;
    std::memcpy(&neg, x.signs + 4 * g, 8);
    const uint8_t sc = x.scales[g / 2];  // g even: both groups' nibbles in one byte
    return {_mm512_set_epi32(e(15), e(14), e(13), e(12), e(11), e(10), e(9), e(8), e(7), e(6), e(5), e(4), e(3), e(2),
                             e(1), e(0)),
            __mmask64(neg), halves16(2 * (sc & 0xf) + 1, 2 * (sc >> 4) + 1)};
  }
};

template <class T, int NT>
void grid_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const typename T::Block*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
    for (int g = 0; g < 8; g += 2) {
      const Pair u = T::pair(x[i], g);
      for (int t = 0; t < NT; ++t) {
        const __m512i a = negate_where(load64(y[t][i].qs + 32 * g), u.neg);
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(u.mag, a), u.scale);
      }
    }
    const float xd = half_to_f32(x[i].d);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y[t][i].d), _mm256_cvtepi32_ps(fold(sumi[t])), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = T::kFactor * hsum(acc[t]);
}

}  // namespace

#define SLUICE_IQ_GRID_AVX512(type, T)                                                              \
  float vec_dot_##type(const void* w, const void* act, int64_t n) { return one_row<grid_dots<T, 1>>(w, act, n); } \
  void vec_dot_##type##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    grid_dots<T, 2>(w, act, stride, n, out);                                                        \
  }                                                                                                 \
  void vec_dot_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    grid_dots<T, 4>(w, act, stride, n, out);                                                        \
  }                                                                                                 \
  void vec_dot_##type##_x8(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    grid_dots<T, 8>(w, act, stride, n, out);                                                        \
  }
SLUICE_IQ_GRID_AVX512(iq2_xxs, Iq2Xxs)
SLUICE_IQ_GRID_AVX512(iq2_xs, Iq2Xs)
SLUICE_IQ_GRID_AVX512(iq2_s, Iq2S)
SLUICE_IQ_GRID_AVX512(iq3_xxs, Iq3Xxs)
SLUICE_IQ_GRID_AVX512(iq3_s, Iq3S)
#undef SLUICE_IQ_GRID_AVX512

}  // namespace sluice::kernels::cpu::avx512
