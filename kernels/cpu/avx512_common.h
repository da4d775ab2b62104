// Small AVX-512 building blocks shared by the *_avx512.cpp kernels. Include only from files
// compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (the build gives those flags to
// *_avx512.cpp, with the AVX2 ones, so avx2_common.h's helpers are usable here too).
//
// How the AVX-512 kernels stay bit-identical to the AVX2 ones: the float steps (which lanes are
// added, scaled and accumulated, in which order) are the AVX2 kernels', on 256-bit vectors. Only
// the integer work is widened: two 32-value groups go through one 512-bit multiply-add, and the
// two 256-bit halves are added back together before the float steps. Integer addition is exact
// and associative, so every int32 lane ends with the integer the AVX2 lane holds.
#pragma once

// GCC 12's AVX-512 intrinsics pass an "undefined" vector as the unused merge source of their
// unmasked forms, which -Wmaybe-uninitialized flags wherever they inline (GCC bug 105593, fixed in
// 12.3). Off for the *_avx512.cpp files, which include this header first.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx2_common.h"

namespace sluice::kernels::cpu::avx512 {

using avx2::act_row;
using avx2::half_to_f32;
using avx2::hsum;
using avx2::one_row;

inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }

// The same 32 bytes in both 256-bit halves (one broadcast load).
inline __m512i broadcast32(const void* p) {
  return _mm512_broadcast_i64x4( _mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// The low and high 256-bit halves added: 16 int32 lanes -> the 8 of an AVX2 vector (exact).
inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// The sum of all 16 int32 lanes (exact).
inline int hsum_i32(__m512i v) { return avx2::hsum_i32(fold(v)); }

// 32 int16: a in the low 256-bit half, b in the high one (shift counts, vpermw indices); and
// 32 int16 in four 128-bit quarters of eight: a, b, c, d (vpermw indices of 16-value scales).
inline __m512i quarters16(int a, int b, int c, int d) {
  auto two = [](int x) { return int((uint32_t(x) << 16) | (uint32_t(x) & 0xFFFF)); };
  return _mm512_set_epi32(two(d), two(d), two(d), two(d), two(c), two(c), two(c), two(c), two(b), two(b), two(b),
                          two(b), two(a), two(a), two(a), two(a));
}

inline __m512i halves16(int a, int b) { return quarters16(a, a, b, b); }

// Int16 scales (up to 32 of them in `scales`) spread by index vector `idx` (halves16/quarters16).
inline __m512i spread16(__m512i scales, __m512i idx) { return _mm512_permutexvar_epi16(idx, scales); }

// y negated (wrapping: -(-128) stays -128, as AVX2's vpsignb does) where mask is set. With mask =
// the sign bits of x and |x| on the left of maddubs, this is vpsignb's x-sign move, which has no
// 512-bit form; lanes where x is 0 need no zeroing, |x| = 0 already zeroes the product.
inline __m512i negate_where(__m512i y, __mmask64 mask) {
  return _mm512_mask_sub_epi8(y, mask, _mm512_setzero_si512(), y);
}

}  // namespace sluice::kernels::cpu::avx512
