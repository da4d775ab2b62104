// Small AVX2 building blocks shared by the *_avx2.cpp kernels. Include only from files compiled
// with -mavx2 -mfma -mf16c (the build gives those flags to *_avx2.cpp).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice::kernels::cpu::avx2 {

// F16C conversion: exact, like blocks.h's fp16_to_f32, but one instruction instead of a branchy
// bit manipulation (it runs once or twice per 32-value block).
inline float half_to_f32(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Software prefetch for the dots that stream weight rows from memory: the lines of the block
// kPrefetchAhead bytes after `block`. One row at a time, the hardware prefetcher alone left the
// one-row Q4_K dot at a third of the streaming read rate (Intel Xeon, 2026-12-07: in-RAM decode
// of the README's K2-shaped file went from 4.1 to 8.4 tok/s with it).
inline constexpr size_t kPrefetchAhead = 2048;
template <class Block>
inline void prefetch_ahead(const Block* block) {
  const char* p = reinterpret_cast<const char*>(block) + kPrefetchAhead;
  for (size_t off = 0; off < sizeof(Block) + 63; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// Sums of adjacent int16 pairs, as int32.
inline __m256i sum_pairs_i16(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

// 8 int32 partial dot products of 32 signed bytes x and 32 signed bytes y. maddubs needs an
// unsigned left operand, so x's sign moves onto y (|x| <= 128 and |y| <= 127 cannot saturate).
inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return sum_pairs_i16(_mm256_maddubs_epi16(ax, sy));
}

// Same for unsigned x (< 128) and signed y.
inline __m256i dot_u8_i8(__m256i x, __m256i y) { return sum_pairs_i16(_mm256_maddubs_epi16(x, y)); }

// 16 packed bytes -> 32 bytes: low nibbles first (values 0..15), then high nibbles (16..31).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes of 0xFF (bit set) or 0x00.
inline __m256i expand_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), shuffle);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Eight int16 sub-block scales, the same in both 128-bit lanes (shuffles work within a lane).
inline __m256i duplicate_lanes(__m128i scales8x16) { return _mm256_set_m128i(scales8x16, scales8x16); }

// Two 16-value sub-blocks side by side: scale 2k of `dup` (from duplicate_lanes) broadcast over
// the low lane, scale 2k+1 over the high lane. One shuffle instead of building from scalars.
inline __m256i pair_scales(__m256i dup, int k) {
  const int lo = ((4 * k + 1) << 8) | (4 * k), hi = ((4 * k + 3) << 8) | (4 * k + 2);
  return _mm256_shuffle_epi8(dup, _mm256_set_m128i(_mm_set1_epi16(int16_t(hi)), _mm_set1_epi16(int16_t(lo))));
}

// Scale k of `dup` (from duplicate_lanes) broadcast over both lanes: one 32-value sub-block.
inline __m256i broadcast_scale(__m256i dup, int k) {
  const int idx = ((2 * k + 1) << 8) | (2 * k);
  return _mm256_shuffle_epi8(dup, _mm256_set1_epi16(int16_t(idx)));
}

// Activation row t of a multi-row dot: rows of `Block`s, `stride` bytes apart.
template <class Block>
inline const Block* act_row(const void* act, size_t stride, int t) {
  return reinterpret_cast<const Block*>(static_cast<const std::byte*>(act) + size_t(t) * stride);
}

// A one-row dot (VecDotFn) through a kernel templated over the number of activation rows (its
// NT = 1 instance), so single- and multi-row calls share one definition of the arithmetic.
template <void (*kDots)(const void*, const void*, size_t, int64_t, float*)>
float one_row(const void* w, const void* act, int64_t n) {
  float r;
  kDots(w, act, 0, n, &r);
  return r;
}

}  // namespace sluice::kernels::cpu::avx2
