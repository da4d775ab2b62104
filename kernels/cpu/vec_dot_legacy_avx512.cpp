// AVX-512 VNNI dot products of the 32-value block formats with Q8_0 / Q8_1 activations.
//
// The AVX2 kernels (vec_dot_legacy_avx2.cpp) with one change: maddubs + madd-by-ones (16-bit pair
// sums, then 32-bit pair sums) becomes one 256-bit vpdpbusd, which adds each group of four byte
// products straight into its int32 lane without saturating. The AVX2 operands never saturate
// maddubs either (|x| <= 128, |y| <= 127), so every lane holds the same integer, and the float
// steps (one fma per block, blocks in order, one accumulator) are the AVX2 ones: ggml's order to the
// bit. A block's float chain is serial, so a 512-bit vector would only help the integer part;
// measured, it did not pay over 256-bit VNNI.
#include "kernels/cpu/avx512_common.h"  // first: its warning pragma must precede <immintrin.h>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

using avx2::expand_bits;
using avx2::unpack_nibbles;

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 8 int32 dots of 4 bytes each: unsigned x (< 256) times signed y.
inline __m256i dot_u8_i8(__m256i x, __m256i y) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, y); }

// 16 packed 4-bit indices -> 32 signed bytes looked up in a 16-entry code table.
inline __m256i lookup_nibbles(const uint8_t* qs, __m128i table) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, mask));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), mask));
  return _mm256_set_m128i(hi, lo);
}

// Signed weights (weights(i): 32 bytes, weight_scale(i): f32) against NT Q8_0 rows, the AVX2
// signed_block_dots order: |x| once per block, x's sign moved onto each row's activations.
template <int NT, class Weights, class WeightScale>
void signed_block_dots(int64_t nb, const void* act, size_t act_stride, Weights weights, WeightScale weight_scale,
                       float* out) {
  const BlockQ8_0* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_0>(act, act_stride, t);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i qx = weights(i);
    const __m256i ax = _mm256_sign_epi8(qx, qx);
    const float ws = weight_scale(i);
    for (int t = 0; t < NT; ++t) {
      const __m256 p = _mm256_cvtepi32_ps(dot_u8_i8(ax, _mm256_sign_epi8(load32(y[t][i].qs), qx)));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(ws * half_to_f32(y[t][i].d)), p, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

// Unsigned weights with a min (Q4_1, Q5_1) against NT Q8_1 rows: the AVX2 order, the min term
// m * s summed as scalar floats block after block, added after the lanes' sum.
template <int NT, class Weights, class Block>
void unsigned_block_dots(const Block* x, int64_t nb, const void* act, size_t act_stride, Weights weights,
                         float* out) {
  const BlockQ8_1* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_1>(act, act_stride, t);
  __m256 acc[NT];
  float mins[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins[t] = 0.0f;
  }
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i qx = weights(i);
    const float xd = half_to_f32(x[i].d), xm = half_to_f32(x[i].m);
    for (int t = 0; t < NT; ++t) {
      mins[t] += xm * half_to_f32(y[t][i].s);
      const __m256 p = _mm256_cvtepi32_ps(dot_u8_i8(qx, load32(y[t][i].qs)));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * half_to_f32(y[t][i].d)), p, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]) + mins[t];
}

template <int NT>
void q8_0_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  signed_block_dots<NT>(
      n / kQK, act, act_stride, [x](int64_t i) { return load32(x[i].qs); },
      [x](int64_t i) { return half_to_f32(x[i].d); }, out);
}

template <int NT>
void q4_0_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const __m256i offset = _mm256_set1_epi8(8);
  signed_block_dots<NT>(
      n / kQK, act, act_stride, [x, offset](int64_t i) { return _mm256_sub_epi8(unpack_nibbles(x[i].qs), offset); },
      [x](int64_t i) { return half_to_f32(x[i].d); }, out);
}

template <int NT>
void q5_0_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  signed_block_dots<NT>(
      n / kQK, act, act_stride,
      [x](int64_t i) {
        // value - 16 = nibble when the fifth bit is set, nibble | 0xF0 (as int8) when it is clear.
        const __m256i high = _mm256_andnot_si256(expand_bits(x[i].qh), _mm256_set1_epi8(char(0xF0)));
        return _mm256_or_si256(unpack_nibbles(x[i].qs), high);
      },
      [x](int64_t i) { return half_to_f32(x[i].d); }, out);
}

template <int NT>
void mxfp4_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  signed_block_dots<NT>(
      n / kQK, act, act_stride, [x, table](int64_t i) { return lookup_nibbles(x[i].qs, table); },
      [x](int64_t i) { return e8m0_to_f32_half(x[i].e); }, out);
}

template <int NT>
void iq4_nl_llamafile_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
  signed_block_dots<NT>(
      n / kQK, act, act_stride, [x, table](int64_t i) { return lookup_nibbles(x[i].qs, table); },
      [x](int64_t i) { return half_to_f32(x[i].d); }, out);
}

template <int NT>
void q4_1_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  unsigned_block_dots<NT>(x, n / kQK, act, act_stride, [x](int64_t i) { return unpack_nibbles(x[i].qs); }, out);
}

template <int NT>
void q5_1_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  unsigned_block_dots<NT>(
      x, n / kQK, act, act_stride,
      [x](int64_t i) {
        const __m256i high = _mm256_and_si256(expand_bits(x[i].qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(unpack_nibbles(x[i].qs), high);
      },
      out);
}

}  // namespace

// Multi-row only: the one-row kernels measured no faster than AVX2's (a block's fma chain, not
// the integer work, bounds them), so dispatch keeps AVX2's, which these equal row by row.
#define SLUICE_LEGACY_AVX512(name)                                                                 \
  void vec_dot_##name##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {  \
    name##_dots<2>(w, act, stride, n, out);                                                          \
  }                                                                                                  \
  void vec_dot_##name##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {  \
    name##_dots<4>(w, act, stride, n, out);                                                          \
  }                                                                                                  \
  void vec_dot_##name##_x8(const void* w, const void* act, size_t stride, int64_t n, float* out) {  \
    name##_dots<8>(w, act, stride, n, out);                                                          \
  }
SLUICE_LEGACY_AVX512(q8_0)
SLUICE_LEGACY_AVX512(q4_0)
SLUICE_LEGACY_AVX512(q4_1)
SLUICE_LEGACY_AVX512(q5_0)
SLUICE_LEGACY_AVX512(q5_1)
SLUICE_LEGACY_AVX512(mxfp4)
SLUICE_LEGACY_AVX512(iq4_nl_llamafile)
#undef SLUICE_LEGACY_AVX512

}  // namespace sluice::kernels::cpu::avx512
