// AVX2 dot products of the codebook i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) and IQ4_XS
// with Q8_K activations.
//
// Per 32-value group the weights are unpacked once for all NT activation rows into unsigned
// magnitudes, +-1 sign bytes and 16 int16 scales (values 0..15 of the group under the first
// eight, 16..31 under the last). Each row then takes one sign flip of its activations, one
// maddubs and one madd: int32 lane k sums values 4k..4k+3 of every group, as in ggml's AVX2 code
// and in the scalar reference (vec_dot_iquants.cpp), whose float steps these repeat exactly.
#include <cmath>
#include <cstring>

#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/avx2_iq.h"
#include "kernels/cpu/blocks_iq.h"
#include "kernels/cpu/iq2_tables.h"
#include "kernels/cpu/iq3_tables.h"
#include "kernels/cpu/iq_sign_tables.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

struct Group {
  __m256i mag;    // 32 unsigned magnitudes (or |value| for IQ4_XS)
  __m256i sign;   // 32 bytes of +1 / -1
  __m256i scale;  // 16 int16: the first 8 for values 0..15, the last 8 for 16..31
};

inline __m256i scales(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16(int16_t(hi)), _mm_set1_epi16(int16_t(lo))); }

inline __m256i signs_of(uint32_t packed7x4) {
  return _mm256_set_epi64x(int64_t(kSignBytes[(packed7x4 >> 21) & 127]), int64_t(kSignBytes[(packed7x4 >> 14) & 127]),
                           int64_t(kSignBytes[(packed7x4 >> 7) & 127]), int64_t(kSignBytes[packed7x4 & 127]));
}

// 32 explicit sign bits (bit set: negative) -> +1 / -1 bytes.
inline __m256i signs_from_bits(const uint8_t* p) { return _mm256_or_si256(expand_bits(p), _mm256_set1_epi8(1)); }

struct Iq2Xxs {
  using Block = BlockIq2Xxs;
  static constexpr float kFactor = 0.125f;
  static Group group(const Block& x, int g) {
    uint32_t aux[2];
    std::memcpy(aux, x.qs + 4 * g, 8);
    const int ls = 2 * int(aux[1] >> 28) + 1;
    return {_mm256_set_epi64x(int64_t(kIq2xxsGrid[aux[0] >> 24]), int64_t(kIq2xxsGrid[(aux[0] >> 16) & 0xff]),
                              int64_t(kIq2xxsGrid[(aux[0] >> 8) & 0xff]), int64_t(kIq2xxsGrid[aux[0] & 0xff])),
            signs_of(aux[1]), _mm256_set1_epi16(int16_t(ls))};
  }
};

struct Iq2Xs {
  using Block = BlockIq2Xs;
  static constexpr float kFactor = 0.125f;
  static Group group(const Block& x, int g) {
    const uint16_t* q = x.qs + 4 * g;
    return {_mm256_set_epi64x(int64_t(kIq2xsGrid[q[3] & 511]), int64_t(kIq2xsGrid[q[2] & 511]),
                              int64_t(kIq2xsGrid[q[1] & 511]), int64_t(kIq2xsGrid[q[0] & 511])),
            _mm256_set_epi64x(int64_t(kSignBytes[q[3] >> 9]), int64_t(kSignBytes[q[2] >> 9]),
                              int64_t(kSignBytes[q[1] >> 9]), int64_t(kSignBytes[q[0] >> 9])),
            scales(2 * (x.scales[g] & 0xf) + 1, 2 * (x.scales[g] >> 4) + 1)};
  }
};

struct Iq2S {
  using Block = BlockIq2S;
  static constexpr float kFactor = 0.125f;
  static Group group(const Block& x, int g) {
    const uint8_t* q = x.qs + 4 * g;
    const int h = x.qh[g];
    return {_mm256_set_epi64x(int64_t(kIq2sGrid[q[3] | ((h << 2) & 0x300)]), int64_t(kIq2sGrid[q[2] | ((h << 4) & 0x300)]),
                              int64_t(kIq2sGrid[q[1] | ((h << 6) & 0x300)]), int64_t(kIq2sGrid[q[0] | ((h << 8) & 0x300)])),
            signs_from_bits(x.qs + kQK_K / 8 + 4 * g), scales(2 * (x.scales[g] & 0xf) + 1, 2 * (x.scales[g] >> 4) + 1)};
  }
};

struct Iq3Xxs {
  using Block = BlockIq3Xxs;
  static constexpr float kFactor = 0.25f;
  static Group group(const Block& x, int g) {
    const uint8_t* q = x.qs + 8 * g;
    uint32_t aux;
    std::memcpy(&aux, x.qs + kQK_K / 4 + 4 * g, 4);
    const int ls = 2 * int(aux >> 28) + 1;
    return {_mm256_set_epi32(int(kIq3xxsGrid[q[7]]), int(kIq3xxsGrid[q[6]]), int(kIq3xxsGrid[q[5]]), int(kIq3xxsGrid[q[4]]),
                             int(kIq3xxsGrid[q[3]]), int(kIq3xxsGrid[q[2]]), int(kIq3xxsGrid[q[1]]), int(kIq3xxsGrid[q[0]])),
            signs_of(aux), _mm256_set1_epi16(int16_t(ls))};
  }
};

struct Iq3S {
  using Block = BlockIq3S;
  static constexpr float kFactor = 1.0f;
  static Group group(const Block& x, int g) {
    const uint8_t* q = x.qs + 8 * g;
    const int h = x.qh[g];
    auto e = [&](int j) { return int(kIq3sGrid[q[j] | ((h << (8 - j)) & 256)]); };
    const int nibble = g % 2 == 0 ? (x.scales[g / 2] & 0xf) : (x.scales[g / 2] >> 4);
    return {_mm256_set_epi32(e(7), e(6), e(5), e(4), e(3), e(2), e(1), e(0)), signs_from_bits(x.signs + 4 * g),
            _mm256_set1_epi16(int16_t(2 * nibble + 1))};
  }
};

struct Iq4Xs {
  using Block = BlockIq4Xs;
  static constexpr float kFactor = 1.0f;
  static Group group(const Block& x, int g) {
    const __m128i values = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 16 * g));
    const __m128i low4 = _mm_set1_epi8(0x0f);
    const __m256i v = _mm256_set_m128i(_mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(bits, 4), low4)),
                                       _mm_shuffle_epi8(values, _mm_and_si128(bits, low4)));
    return {_mm256_sign_epi8(v, v), _mm256_or_si256(_mm256_cmpgt_epi8(_mm256_setzero_si256(), v), _mm256_set1_epi8(1)),
            _mm256_set1_epi16(int16_t(iq4_xs_scale(x, g)))};
  }
};

// Super-block i's exact integer products with NT activation rows, in 8 int32 lanes per row:
// what both orders below sum, each in its own way.
template <class T, int NT>
void block_sums(const typename T::Block& x, const BlockQ8_K* const* y, int64_t i, __m256i* sumi) {
  for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const Group u = T::group(x, g);
    for (int t = 0; t < NT; ++t) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[t][i].qs + 32 * g));
      const __m256i p = _mm256_maddubs_epi16(u.mag, _mm256_sign_epi8(a, u.sign));
      sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, u.scale));
    }
  }
}

template <class T, int NT>
void grid_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const typename T::Block*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i sumi[NT];
    block_sums<T, NT>(x[i], y, i, sumi);
    const float xd = half_to_f32(x[i].d);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = T::kFactor * hsum(acc[t]);
}

// The IQ panel GEMM's order (scalar_iq.h): the same exact integers, summed over the super-block
// into one int32, then one fma per super-block with (x.d * factor) * y.d.
template <class T, int NT>
void grid_panel_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const typename T::Block*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  float acc[NT] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i sumi[NT];
    block_sums<T, NT>(x[i], y, i, sumi);
    const float dfac = half_to_f32(x[i].d) * T::kFactor;
    for (int t = 0; t < NT; ++t) acc[t] = std::fma(float(hsum_i32(sumi[t])), dfac * y[t][i].d, acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

}  // namespace

#define SLUICE_IQ_GRID(type, T)                                                                    \
  float vec_dot_##type(const void* w, const void* act, int64_t n) {                                \
    return one_row<grid_dots<T, 1>>(w, act, n);                                                    \
  }                                                                                                \
  void vec_dot_##type##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    grid_dots<T, 2>(w, act, stride, n, out);                                                       \
  }                                                                                                \
  void vec_dot_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    grid_dots<T, 4>(w, act, stride, n, out);                                                       \
  }                                                                                                \
  float vec_dot_panel_##type(const void* w, const void* act, int64_t n) {                          \
    return one_row<grid_panel_dots<T, 1>>(w, act, n);                                              \
  }                                                                                                \
  void vec_dot_panel_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    grid_panel_dots<T, 4>(w, act, stride, n, out);                                                 \
  }
SLUICE_IQ_GRID(iq2_xxs, Iq2Xxs)
SLUICE_IQ_GRID(iq2_xs, Iq2Xs)
SLUICE_IQ_GRID(iq2_s, Iq2S)
SLUICE_IQ_GRID(iq3_xxs, Iq3Xxs)
SLUICE_IQ_GRID(iq3_s, Iq3S)
SLUICE_IQ_GRID(iq4_xs, Iq4Xs)
#undef SLUICE_IQ_GRID

}  // namespace sluice::kernels::cpu::avx2
