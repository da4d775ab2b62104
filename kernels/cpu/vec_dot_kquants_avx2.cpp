// AVX2 dot products of the k-quants with Q8_K activations.
//
// Per super-block the weights are unpacked 32 at a time into unsigned bytes, multiplied with the
// activation bytes by maddubs (pairs summed into int16), weighted by the sub-block scale with
// madd (into int32), and accumulated as integers; the super-block's f32 scale is applied once.
// Offsets (Q6_K's -32, Q3_K's -4) are applied as a second maddubs and a subtraction, which keeps
// every maddubs operand unsigned on the left as the instruction requires.
#include <cmath>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Q4_K/Q5_K's 12 packed bytes -> 8 scales (bytes 0..7) and 8 mins (bytes 8..15).
inline void unpack_scales_mins(const uint8_t* packed, uint8_t out[16]) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);  // mins 4..7
  const uint32_t mins_lo = u[1] & kLow6;                        // mins 0..3
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);         // scales 4..7
  u[2] = mins_lo;
  u[0] &= kLow6;  // scales 0..3
  std::memcpy(out, u, 16);
}

inline int min_term(const uint8_t* mins, const int16_t* bsums) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return s;
}

// Four exact int32 sums of 8 lanes each (four rows' integer dots), in one vector.
inline __m128i hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// Four exact int32 sums of 4 lanes each, in one vector.
inline __m128i hsum4_i32(__m128i a, __m128i b, __m128i c, __m128i d) {
  return _mm_hadd_epi32(_mm_hadd_epi32(a, b), _mm_hadd_epi32(c, d));
}

// Q8_K's 16-value sums paired into the 8 sub-block sums of 32 values (int16; exact).
inline __m128i subblock_sums(const BlockQ8_K& y) {
  const __m256i bsums = load32(y.bsums);
  return _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
}

// Adds Q4_K sub-block pair j of block i (64 weights, scales from `sc`) dotted with each row's
// activations to sumi[t]: the weights are unpacked once for all NT rows. Integer sums, exact.
template <int NT>
inline void add_q4_k_pair(const BlockQ4_K& xb, const BlockQ8_K* const* y, int64_t i, __m256i sc, int j,
                          __m256i* sumi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i q4 = load32(xb.qs + 32 * j);
  const __m256i w_lo = _mm256_and_si256(q4, low4), w_hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
  const __m256i s_lo = broadcast_scale(sc, 2 * j), s_hi = broadcast_scale(sc, 2 * j + 1);
  for (int t = 0; t < NT; ++t) {
    const __m256i lo = _mm256_maddubs_epi16(w_lo, load32(y[t][i].qs + 64 * j));
    const __m256i hi = _mm256_maddubs_epi16(w_hi, load32(y[t][i].qs + 64 * j + 32));
    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(lo, s_lo));
    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(hi, s_hi));
  }
}

// Each kernel below is a template over NT, the activation rows dotted with one weight row per
// call: the weights are unpacked once per 32 values for all NT rows, and every row's arithmetic
// is exactly the one-row kernel's (same operations in the same order), so out[t] is
// bit-identical to the NT = 1 instance on row t alone.

// The min term is accumulated as ggml's AVX2 vec_dot does it: four float lanes, each the fma of
// -dmin with the exact min products of two sub-blocks, reduced (0+2)+(1+3) after the last block.
template <int NT>
void q4_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  __m256 acc[NT];
  __m128 acc_m[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    acc_m[t] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_ahead(x + i);
    uint8_t sm[16];
    unpack_scales_mins(x[i].scales, sm);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8)));
    float d[NT];
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) {
      d[t] = y[t][i].d * xd;
      const float neg_dmin = -y[t][i].d * xdmin;
      // mins . sub-block sums, pairwise.
      const __m128i min_pairs = _mm_madd_epi16(mins, subblock_sums(y[t][i]));
      acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(neg_dmin), _mm_cvtepi32_ps(min_pairs), acc_m[t]);
      sumi[t] = _mm256_setzero_si256();
    }
    const __m256i sc =
        duplicate_lanes(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm))));
    for (int j = 0; j < 4; ++j) add_q4_k_pair<NT>(x[i], y, i, sc, j, sumi);
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d[t]), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) {
    __m128 m = _mm_add_ps(acc_m[t], _mm_movehl_ps(acc_m[t], acc_m[t]));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    out[t] = hsum(acc[t]) + _mm_cvtss_f32(m);
  }
}

// The orders of llama.cpp's repacked Q4_K GEMV (kPairsPerGroup 4: per super-block) and 4-row GEMM
// (1: per pair of sub-blocks); see the scalar q4_k_repack_order. The integer part is
// q4_k_dots', summed to one exact int per group.
template <int kPairsPerGroup, int NT>
void q4_k_repack_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  float acc[NT], acc_min[NT];
  for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = 0.0f;
  // NT == 4 keeps the four rows' accumulators as the lanes of one vector, and reduces their
  // integer sums together (the same integers, the same fma per lane as the scalar lines).
  __m128 acc4 = _mm_setzero_ps(), acc_min4 = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_ahead(x + i);
    uint8_t sm[16];
    unpack_scales_mins(x[i].scales, sm);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8)));
    const __m256i sc =
        duplicate_lanes(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm))));
    // min_pairs[t] lane j: the exact min products of sub-block pair j, mins[2j] * (sum of the
    // activation over sub-block 2j) + mins[2j+1] * (... 2j+1), from Q8_K's 16-value sums.
    __m128i min_pairs[NT];
    for (int t = 0; t < NT; ++t) min_pairs[t] = _mm_madd_epi16(mins, subblock_sums(y[t][i]));
    if constexpr (NT == 4) {
      const __m128 dy = _mm_set_ps(y[3][i].d, y[2][i].d, y[1][i].d, y[0][i].d);
      const __m128 d4 = _mm_mul_ps(_mm_set1_ps(xd), dy), dmin4 = _mm_mul_ps(_mm_set1_ps(xdmin), dy);
      // The GEMM order takes one sub-block pair at a time: each row's min pairs as scalars.
      alignas(16) int32_t mp[4][4];
      if constexpr (kPairsPerGroup == 1)
        for (int t = 0; t < 4; ++t) _mm_store_si128(reinterpret_cast<__m128i*>(mp[t]), min_pairs[t]);
      for (int g = 0; g < 4; g += kPairsPerGroup) {
        __m256i sumi[4];
        for (int t = 0; t < 4; ++t) sumi[t] = _mm256_setzero_si256();
        for (int j = g; j < g + kPairsPerGroup; ++j) add_q4_k_pair<4>(x[i], y, i, sc, j, sumi);
        const __m128i isum = hsum4_i32(sumi[0], sumi[1], sumi[2], sumi[3]);
        __m128i group_mins;
        if constexpr (kPairsPerGroup == 4) {
          group_mins = hsum4_i32(min_pairs[0], min_pairs[1], min_pairs[2], min_pairs[3]);
        } else {  // the GEMM order: pair g alone
          group_mins = _mm_set_epi32(mp[3][g], mp[2][g], mp[1][g], mp[0][g]);
        }
        acc4 = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), d4, acc4);
        acc_min4 = _mm_fmadd_ps(_mm_cvtepi32_ps(group_mins), dmin4, acc_min4);
      }
      continue;
    }
    float d[NT], dmin[NT];
    alignas(16) int32_t summs[NT][4];
    for (int t = 0; t < NT; ++t) {
      d[t] = xd * y[t][i].d;
      dmin[t] = xdmin * y[t][i].d;
      _mm_store_si128(reinterpret_cast<__m128i*>(summs[t]), min_pairs[t]);
    }
    for (int g = 0; g < 4; g += kPairsPerGroup) {
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
      for (int j = g; j < g + kPairsPerGroup; ++j) add_q4_k_pair<NT>(x[i], y, i, sc, j, sumi);
      for (int t = 0; t < NT; ++t) {
        int group_mins = 0;
        for (int j = g; j < g + kPairsPerGroup; ++j) group_mins += summs[t][j];
        acc[t] = std::fma(float(hsum_i32(sumi[t])), d[t], acc[t]);
        acc_min[t] = std::fma(float(group_mins), dmin[t], acc_min[t]);
      }
    }
  }
  if constexpr (NT == 4) {
    _mm_storeu_ps(acc, acc4);
    _mm_storeu_ps(acc_min, acc_min4);
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t] - acc_min[t];
}

}  // namespace

float vec_dot_q4_k(const void* w, const void* act, int64_t n) { return one_row<q4_k_dots<1>>(w, act, n); }
float vec_dot_q4_k_repack(const void* w, const void* act, int64_t n) {
  return one_row<q4_k_repack_dots<4, 1>>(w, act, n);
}
float vec_dot_q4_k_repack_gemm(const void* w, const void* act, int64_t n) {
  return one_row<q4_k_repack_dots<1, 1>>(w, act, n);
}
void vec_dot_q4_k_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { q4_k_dots<2>(w, act, stride, n, out); }
void vec_dot_q4_k_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { q4_k_dots<4>(w, act, stride, n, out); }
void vec_dot_q4_k_repack_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q4_k_repack_dots<4, 2>(w, act, stride, n, out);
}
void vec_dot_q4_k_repack_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q4_k_repack_dots<4, 4>(w, act, stride, n, out);
}
void vec_dot_q4_k_repack_gemm_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q4_k_repack_dots<1, 2>(w, act, stride, n, out);
}
void vec_dot_q4_k_repack_gemm_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q4_k_repack_dots<1, 4>(w, act, stride, n, out);
}

float vec_dot_q5_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins_sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_ahead(x + i);
    uint8_t sm[16];
    unpack_scales_mins(x[i].scales, sm);
    const float d = y[i].d * half_to_f32(x[i].d);
    const float dmin = y[i].d * half_to_f32(x[i].dmin);
    mins_sum = std::fma(dmin, float(min_term(sm + 8, y[i].bsums)), mins_sum);
    const __m256i hbits = load32(x[i].qh);
    const __m256i sc =
        duplicate_lanes(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm))));
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i q5 = load32(x[i].qs + 32 * j);
      // Bit 2j of qh[l] is the fifth bit of value l of the low half, bit 2j+1 of the high half.
      const __m128i shift_lo = _mm_cvtsi32_si128(2 * j), shift_hi = _mm_cvtsi32_si128(2 * j + 1);
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hbits, shift_lo), one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hbits, shift_hi), one), 4);
      const __m256i v_lo = _mm256_or_si256(_mm256_and_si256(q5, low4), h_lo);
      const __m256i v_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q5, 4), low4), h_hi);
      const __m256i lo = _mm256_maddubs_epi16(v_lo, load32(y[i].qs + 64 * j));
      const __m256i hi = _mm256_maddubs_epi16(v_hi, load32(y[i].qs + 64 * j + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(lo, broadcast_scale(sc, 2 * j)));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(hi, broadcast_scale(sc, 2 * j + 1)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc) - mins_sum;
}

namespace {

template <int NT>
void q6_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i m3 = _mm256_set1_epi8(0x03);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_ahead(x + i);
    const float xd = half_to_f32(x[i].d);
    const __m256i all_scales =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[i].ql + 64 * half;
      const __m256i qh = load32(x[i].qh + 32 * half);
      const __m256i sc = duplicate_lanes(
          _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].scales + 8 * half))));
      const __m256i ql0 = load32(ql), ql1 = load32(ql + 32);
      // Values 0..63 of the four 32-value groups of this half.
      __m256i v[4];
      v[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
      v[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
      v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
      v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
      for (int g = 0; g < 4; ++g) {
        const __m256i ps = pair_scales(sc, g);
        for (int t = 0; t < NT; ++t) {
          const __m256i p = _mm256_maddubs_epi16(v[g], load32(y[t][i].qs + 128 * half + 32 * g));  // <= 2*63*128
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, ps));
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load32(y[t][i].bsums), all_scales), 5);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], offset)),
                               acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

}  // namespace

// As ggml's AVX2 vec_dot sums: the products of the unsigned 6-bit values go into the 8 int32
// lanes, and the -32 offset is taken off afterwards from Q8_K's 16-value sums, lane k losing
// 32 * (bsums[2k] * scale[2k] + bsums[2k+1] * scale[2k+1]). The integer total is the same either
// way, but which lane holds what decides the float rounding.
float vec_dot_q6_k(const void* w, const void* act, int64_t n) { return one_row<q6_k_dots<1>>(w, act, n); }
void vec_dot_q6_k_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { q6_k_dots<2>(w, act, stride, n, out); }
void vec_dot_q6_k_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { q6_k_dots<4>(w, act, stride, n, out); }

namespace {

// Q2_K's 16 sub-block scales (low nibbles) as int16.
inline __m256i q2_k_scales(__m128i sc_bytes) {
  return _mm256_cvtepu8_epi16(_mm_and_si128(sc_bytes, _mm_set1_epi8(0x0F)));
}

// Adds half `half` of Q2_K block i (values 128 * half .. +127, sub-blocks 8 * half .. +7) dotted
// with each row's activations into sumi[t]'s 8 int32 lanes, lane k holding bytes 4k .. 4k+3 of
// each of its four 32-value groups, as ggml's AVX2 vec_dot lays them out. Integer sums, exact.
template <int NT>
inline void add_q2_k_half(const BlockQ2_K& xb, const BlockQ8_K* const* y, int64_t i, __m256i all_scales, int half,
                          __m256i* sumi) {
  const __m256i m3 = _mm256_set1_epi8(0x03);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i q2 = load32(xb.qs + 32 * half);
  const __m256i sc =
      duplicate_lanes(half == 0 ? _mm256_castsi256_si128(all_scales) : _mm256_extracti128_si256(all_scales, 1));
  for (int s = 0; s < 4; s += 2) {
    const __m256i v0 = _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * s)), m3);
    const __m256i v1 = _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * s + 2)), m3);
    const __m256i sv0 = _mm256_mullo_epi16(v0, pair_scales(sc, s));
    const __m256i sv1 = _mm256_mullo_epi16(v1, pair_scales(sc, s + 1));
    for (int t = 0; t < NT; ++t) {
      const __m256i p0 = _mm256_maddubs_epi16(sv0, load32(y[t][i].qs + 128 * half + 32 * s));
      const __m256i p1 = _mm256_maddubs_epi16(sv1, load32(y[t][i].qs + 128 * half + 32 * s + 32));
      sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones16));
    }
  }
}

// Q2_K's values (0..3) times their 4-bit scales (0..15) fit a byte, so the scale is multiplied
// into the weights once per 32 values (one 16-bit multiply: no product carries into the next
// byte) for all NT rows, and each row's two maddubs of a 64-value pair of groups are added as
// int16 (|sum| <= 2 * 2 * 45 * 127) before one widening madd. Every int32 lane ends with the
// same integer as the scale-per-madd form ggml uses, so the float rounding is unchanged.
// The float steps are ggml's AVX2 vec_dot's: one 8-lane accumulator per row that takes, per
// super-block, first the fma of -d_y * dmin with the 8 lanes of min products (mins[2k] *
// bsums[2k] + mins[2k+1] * bsums[2k+1] in lane k), then the fma of d_y * d with the 8 lanes of
// scaled sums; one horizontal sum at the end.
template <int NT>
void q2_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_ahead(x + i);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    const __m256i mins =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), _mm_set1_epi8(0x0F)));
    for (int t = 0; t < NT; ++t) {
      const __m256i prod = _mm256_madd_epi16(mins, load32(y[t][i].bsums));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-y[t][i].d * xdmin), _mm256_cvtepi32_ps(prod), acc[t]);
    }
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    const __m256i all_scales = q2_k_scales(sc_bytes);
    for (int half = 0; half < 2; ++half) add_q2_k_half<NT>(x[i], y, i, all_scales, half, sumi);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

// The orders of llama.cpp's repacked Q2_K GEMV (kHalvesPerGroup 2: per super-block) and 4-row
// GEMM (1: per 128-value half); see the scalar q2_k_repack_order. The integer part is
// q2_k_dots', summed to one exact int per group; the min products of the group likewise.
template <int kHalvesPerGroup, int NT>
void q2_k_repack_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  float acc[NT], acc_min[NT];
  for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_ahead(x + i);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    const __m256i mins =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), _mm_set1_epi8(0x0F)));
    // Lane k: the min products of sub-blocks 2k and 2k+1 (lanes 0..3 the first half).
    alignas(32) int32_t min_lanes[NT][8];
    for (int t = 0; t < NT; ++t)
      _mm256_store_si256(reinterpret_cast<__m256i*>(min_lanes[t]), _mm256_madd_epi16(mins, load32(y[t][i].bsums)));
    const __m256i all_scales = q2_k_scales(sc_bytes);
    for (int g = 0; g < 2; g += kHalvesPerGroup) {
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
      for (int half = g; half < g + kHalvesPerGroup; ++half) add_q2_k_half<NT>(x[i], y, i, all_scales, half, sumi);
      for (int t = 0; t < NT; ++t) {
        int group_mins = 0;
        for (int k = 4 * g; k < 4 * (g + kHalvesPerGroup); ++k) group_mins += min_lanes[t][k];
        acc[t] = std::fma(float(hsum_i32(sumi[t])), xd * y[t][i].d, acc[t]);
        acc_min[t] = std::fma(float(group_mins), xdmin * y[t][i].d, acc_min[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t] - acc_min[t];
}

template <int NT>
void q3_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m256i m3 = _mm256_set1_epi8(0x03);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i four = _mm256_set1_epi8(4);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_ahead(x + i);
    int8_t scales[16];
    unpack_q3_k_scales(x[i].scales, scales);
    const float xd = half_to_f32(x[i].d);
    const __m256i hbits = load32(x[i].hmask);
    const __m256i all_scales =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i q3 = load32(x[i].qs + 32 * half);
      const __m256i sc = duplicate_lanes(half == 0 ? _mm256_castsi256_si128(all_scales)
                                                   : _mm256_extracti128_si256(all_scales, 1));
      for (int s = 0; s < 4; ++s) {
        const int group = 4 * half + s;  // 32-value group: its high bits are bit `group` of hmask
        const __m256i low = _mm256_and_si256(_mm256_srl_epi16(q3, _mm_cvtsi32_si128(2 * s)), m3);
        // value = low - 4 where the high bit is clear, low where it is set: -4..3.
        const __m256i hset = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(group)), one);
        const __m256i v = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(hset, 2)), four);
        const __m256i abs_v = _mm256_abs_epi8(v);
        const __m256i ps = pair_scales(sc, s);
        for (int t = 0; t < NT; ++t) {
          // |v| * (a with v's sign) = v * a, one maddubs (|a| <= 127 never overflows the sign
          // flip); each int16 is ggml's low * a - 4 * a, so the lanes are unchanged.
          const __m256i a = load32(y[t][i].qs + 32 * group);
          const __m256i p = _mm256_maddubs_epi16(abs_v, _mm256_sign_epi8(a, v));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, ps));
        }
      }
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

}  // namespace

float vec_dot_q2_k(const void* w, const void* act, int64_t n) { return one_row<q2_k_dots<1>>(w, act, n); }
void vec_dot_q2_k_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { q2_k_dots<2>(w, act, stride, n, out); }
void vec_dot_q2_k_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { q2_k_dots<4>(w, act, stride, n, out); }
float vec_dot_q2_k_repack(const void* w, const void* act, int64_t n) {
  return one_row<q2_k_repack_dots<2, 1>>(w, act, n);
}
float vec_dot_q2_k_repack_gemm(const void* w, const void* act, int64_t n) {
  return one_row<q2_k_repack_dots<1, 1>>(w, act, n);
}
void vec_dot_q2_k_repack_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q2_k_repack_dots<2, 2>(w, act, stride, n, out);
}
void vec_dot_q2_k_repack_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q2_k_repack_dots<2, 4>(w, act, stride, n, out);
}
void vec_dot_q2_k_repack_gemm_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q2_k_repack_dots<1, 2>(w, act, stride, n, out);
}
void vec_dot_q2_k_repack_gemm_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q2_k_repack_dots<1, 4>(w, act, stride, n, out);
}
float vec_dot_q3_k(const void* w, const void* act, int64_t n) { return one_row<q3_k_dots<1>>(w, act, n); }
void vec_dot_q3_k_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { q3_k_dots<2>(w, act, stride, n, out); }
void vec_dot_q3_k_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { q3_k_dots<4>(w, act, stride, n, out); }
void vec_dot_q3_k_x8(const void* w, const void* act, size_t stride, int64_t n, float* out) { q3_k_dots<8>(w, act, stride, n, out); }

}  // namespace sluice::kernels::cpu::avx2
