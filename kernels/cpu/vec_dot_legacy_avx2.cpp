// AVX2 dot products of the 32-value block formats with Q8_0 / Q8_1 activations.
// Per block: unpack the weights to 32 signed (or unsigned) bytes, one integer dot product into
// 8 int32 lanes, then one FMA with the combined scale.
#include <cmath>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 scale_of(float a, float b) { return _mm256_set1_ps(a * b); }

// Runs block(i, acc) over all blocks with one accumulator, blocks in order: ggml's AVX2 order, so
// that each dot is llama.cpp's to the bit (two accumulators, even and odd blocks, were faster but
// moved the last bits, which quantized activations and recurrent state then amplify).
template <class Block>
inline float over_blocks(int64_t nb, Block block) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) acc = block(i, acc);
  return hsum(acc);
}

// 16 packed 4-bit indices -> 32 signed bytes looked up in a 16-entry code table.
inline __m256i lookup_nibbles(const uint8_t* qs, __m128i table) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, mask));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), mask));
  return _mm256_set_m128i(hi, lo);
}

// Dots of blocks whose weights unpack to 32 signed bytes (weights(i)) and one f32 scale
// (weight_scale(i)) with NT Q8_0 activation rows: the weights are unpacked once per block for all
// rows, and each row's arithmetic is exactly ggml's one-row AVX2 order (one accumulator, blocks in
// order), so out[t] is bit-identical to the NT = 1 instance on row t.
template <int NT, class Weights, class WeightScale>
void signed_block_dots(int64_t nb, const void* act, size_t act_stride, Weights weights, WeightScale weight_scale,
                       float* out) {
  const BlockQ8_0* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_0>(act, act_stride, t);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i qx = weights(i);
    const __m256i ax = _mm256_sign_epi8(qx, qx);  // dot_i8's unsigned left operand, once per block
    const float ws = weight_scale(i);
    for (int t = 0; t < NT; ++t) {
      const __m256i sy = _mm256_sign_epi8(load32(y[t][i].qs), qx);
      const __m256 p = _mm256_cvtepi32_ps(sum_pairs_i16(_mm256_maddubs_epi16(ax, sy)));
      acc[t] = _mm256_fmadd_ps(scale_of(ws, half_to_f32(y[t][i].d)), p, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
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

// IQ4_NL's other two orders (scalar.h): ggml's vec_dot, even and odd blocks in two 8-lane
// accumulators (an odd last block added after the reduction, as ggml's scalar tail), and the
// repacked GEMV/GEMM, each block's integer sum into the row's one float by one fma.
inline __m256i iq4_nl_values(const BlockIq4Nl& b) {
  return lookup_nibbles(b.qs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
}

inline __m256i signed_dot(__m256i qx, const int8_t* y) {
  return sum_pairs_i16(_mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(load32(y), qx)));
}

template <int NT>
void iq4_nl_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const BlockQ8_0* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_0>(act, act_stride, t);
  __m256 acc[2][NT];
  for (int t = 0; t < NT; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    for (int h = 0; h < 2; ++h) {
      const __m256i qx = iq4_nl_values(x[i + h]);
      const float xd = half_to_f32(x[i + h].d);
      for (int t = 0; t < NT; ++t)
        acc[h][t] = _mm256_fmadd_ps(scale_of(half_to_f32(y[t][i + h].d), xd),
                                    _mm256_cvtepi32_ps(signed_dot(qx, y[t][i + h].qs)), acc[h][t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(_mm256_add_ps(acc[0][t], acc[1][t]));
  for (; i < nb; ++i) {
    const __m256i qx = iq4_nl_values(x[i]);
    for (int t = 0; t < NT; ++t)
      out[t] = std::fma(half_to_f32(y[t][i].d) * half_to_f32(x[i].d), float(hsum_i32(signed_dot(qx, y[t][i].qs))), out[t]);
  }
}

template <int NT>
void iq4_nl_repack_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const BlockQ8_0* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_0>(act, act_stride, t);
  float acc[NT] = {};
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i qx = iq4_nl_values(x[i]);
    const float xd = half_to_f32(x[i].d);
    for (int t = 0; t < NT; ++t)
      acc[t] = std::fma(float(hsum_i32(signed_dot(qx, y[t][i].qs))), xd * half_to_f32(y[t][i].d), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

}  // namespace

// One accumulator, blocks in order: ggml's AVX2 order. Q8_0 weights feed recurrent state in
// Kimi K3, where a different float order drifts away from llama.cpp (two accumulators did).
float vec_dot_q8_0(const void* w, const void* act, int64_t n) { return one_row<q8_0_dots<1>>(w, act, n); }

float vec_dot_q4_0(const void* w, const void* act, int64_t n) { return one_row<q4_0_dots<1>>(w, act, n); }

float vec_dot_q4_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float mins = 0.0f;
  const float dot = over_blocks(n / kQK, [&](int64_t i, __m256 acc) {
    mins += half_to_f32(x[i].m) * half_to_f32(y[i].s);
    const __m256 p = _mm256_cvtepi32_ps(dot_u8_i8(unpack_nibbles(x[i].qs), load32(y[i].qs)));
    return _mm256_fmadd_ps(scale_of(half_to_f32(x[i].d), half_to_f32(y[i].d)), p, acc);
  });
  return dot + mins;
}

float vec_dot_q5_0(const void* w, const void* act, int64_t n) { return one_row<q5_0_dots<1>>(w, act, n); }

float vec_dot_q5_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float mins = 0.0f;
  const float dot = over_blocks(n / kQK, [&](int64_t i, __m256 acc) {
    mins += half_to_f32(x[i].m) * half_to_f32(y[i].s);
    const __m256i high = _mm256_and_si256(expand_bits(x[i].qh), _mm256_set1_epi8(0x10));
    const __m256i qx = _mm256_or_si256(unpack_nibbles(x[i].qs), high);
    const __m256 p = _mm256_cvtepi32_ps(dot_u8_i8(qx, load32(y[i].qs)));
    return _mm256_fmadd_ps(scale_of(half_to_f32(x[i].d), half_to_f32(y[i].d)), p, acc);
  });
  return dot + mins;
}

float vec_dot_mxfp4(const void* w, const void* act, int64_t n) { return one_row<mxfp4_dots<1>>(w, act, n); }

float vec_dot_iq4_nl(const void* w, const void* act, int64_t n) { return one_row<iq4_nl_dots<1>>(w, act, n); }
float vec_dot_iq4_nl_repack(const void* w, const void* act, int64_t n) {
  return one_row<iq4_nl_repack_dots<1>>(w, act, n);
}
// IQ4_NL in llamafile's order (scalar.h).
float vec_dot_iq4_nl_llamafile(const void* w, const void* act, int64_t n) {
  return one_row<iq4_nl_llamafile_dots<1>>(w, act, n);
}


#define SLUICE_MULTI_ROW(type)                                                                      \
  void vec_dot_##type##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    type##_dots<2>(w, act, stride, n, out);                                                         \
  }                                                                                                 \
  void vec_dot_##type##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    type##_dots<4>(w, act, stride, n, out);                                                         \
  }
SLUICE_MULTI_ROW(q8_0)
SLUICE_MULTI_ROW(q4_0)
SLUICE_MULTI_ROW(q5_0)
SLUICE_MULTI_ROW(mxfp4)
SLUICE_MULTI_ROW(iq4_nl_llamafile)
SLUICE_MULTI_ROW(iq4_nl)
SLUICE_MULTI_ROW(iq4_nl_repack)
#undef SLUICE_MULTI_ROW

}  // namespace sluice::kernels::cpu::avx2
