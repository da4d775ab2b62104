// AVX2 dot products of the 32-value block formats with Q8_0 / Q8_1 activations.
// Per block: unpack the weights to 32 signed (or unsigned) bytes, one integer dot product into
// 8 int32 lanes, then one FMA with the combined scale.
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

}  // namespace

float vec_dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  // One accumulator, blocks in order: ggml's AVX2 order. Q8_0 weights feed recurrent state in
  // Kimi K3, where a different float order drifts away from llama.cpp (two accumulators did).
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 p = _mm256_cvtepi32_ps(dot_i8(load32(x[i].qs), load32(y[i].qs)));
    acc = _mm256_fmadd_ps(scale_of(half_to_f32(x[i].d), half_to_f32(y[i].d)), p, acc);
  }
  return hsum(acc);
}

float vec_dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const __m256i offset = _mm256_set1_epi8(8);
  const float dot = over_blocks(n / kQK, [&](int64_t i, __m256 acc) {
    const __m256i qx = _mm256_sub_epi8(unpack_nibbles(x[i].qs), offset);
    const __m256 p = _mm256_cvtepi32_ps(dot_i8(qx, load32(y[i].qs)));
    return _mm256_fmadd_ps(scale_of(half_to_f32(x[i].d), half_to_f32(y[i].d)), p, acc);
  });
  return dot;
}

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

float vec_dot_q5_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const float dot = over_blocks(n / kQK, [&](int64_t i, __m256 acc) {
    // value - 16 = nibble when the fifth bit is set, nibble | 0xF0 (as int8) when it is clear.
    const __m256i high = _mm256_andnot_si256(expand_bits(x[i].qh), _mm256_set1_epi8(char(0xF0)));
    const __m256i qx = _mm256_or_si256(unpack_nibbles(x[i].qs), high);
    const __m256 p = _mm256_cvtepi32_ps(dot_i8(qx, load32(y[i].qs)));
    return _mm256_fmadd_ps(scale_of(half_to_f32(x[i].d), half_to_f32(y[i].d)), p, acc);
  });
  return dot;
}

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

float vec_dot_mxfp4(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  const float dot = over_blocks(n / kQK, [&](int64_t i, __m256 acc) {
    const __m256 p = _mm256_cvtepi32_ps(dot_i8(lookup_nibbles(x[i].qs, table), load32(y[i].qs)));
    return _mm256_fmadd_ps(scale_of(half_to_f32(y[i].d), e8m0_to_f32_half(x[i].e)), p, acc);
  });
  return dot;
}

float vec_dot_iq4_nl(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
  const float dot = over_blocks(n / kQK, [&](int64_t i, __m256 acc) {
    const __m256 p = _mm256_cvtepi32_ps(dot_i8(lookup_nibbles(x[i].qs, table), load32(y[i].qs)));
    return _mm256_fmadd_ps(scale_of(half_to_f32(x[i].d), half_to_f32(y[i].d)), p, acc);
  });
  return dot;
}

}  // namespace sluice::kernels::cpu::avx2
