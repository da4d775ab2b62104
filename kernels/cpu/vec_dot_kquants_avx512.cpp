// AVX-512 (BW + VNNI) dot products of the k-quants with Q8_K activations.
//
// The arithmetic of vec_dot_kquants_avx2.cpp, with the integer work of two 32-value groups in one
// 512-bit vector: the weights of both groups are unpacked side by side, the 64 activation bytes are
// one load, and VNNI's vpdpwssd (maddubs pairs times int16 scales, added into int32 without
// saturation) or vpdpbusd (Q2_K, whose scales are multiplied into the bytes) replaces madd + add.
// The two halves are folded into 8 int32 lanes per super-block (avx512_common.h: exact), and from
// there the float steps are the AVX2 kernels', so every result is the AVX2 result to the bit.
// The maddubs operands are the AVX2 ones, and none of those saturate (see the AVX2 file).
#include "kernels/cpu/avx512_common.h"
#include "kernels/cpu/avx2_common.h"  // first: its warning pragma must precede <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

inline __m128i loadl(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }

// Q4_K/Q5_K's 12 packed bytes -> 8 scales (bytes 0..7) and 8 mins (bytes 8..15).
inline void unpack_scales_mins(const uint8_t* packed, uint8_t out[16]) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  const uint32_t mins_lo = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  u[2] = mins_lo;
  u[0] &= kLow6;
  std::memcpy(out, u, 16);
}

// Q8_K's 16-value sums paired into the 8 sub-block sums of 32 values (int16; exact).
inline __m128i subblock_sums(const BlockQ8_K& y) {
  const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
  return _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
}

// Sub-block pair j of a Q4_K/Q5_K block (values 64j .. 64j+63): `v` the 64 unsigned weights, the
// low half under scale 2j and the high half under 2j+1 of `sc16` (8 int16 scales). Adds each row's
// integer dot into its 16 int32 lanes.
template <int NT>
inline void add_pair(__m512i v, __m512i sc16, int j, const BlockQ8_K* const* y, int64_t i, __m512i* sumi) {
  const __m512i s = spread16(sc16, halves16(2 * j, 2 * j + 1));
  for (int t = 0; t < NT; ++t)
    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(v, load64(y[t][i].qs + 64 * j)), s);
}

// Q4_K pair j's weights: low nibbles in the low half, high nibbles in the high half.
inline __m512i q4_pair(const BlockQ4_K& x, int j) {
  return _mm512_and_si512(_mm512_srlv_epi16(broadcast32(x.qs + 32 * j), halves16(0, 4)), _mm512_set1_epi8(0x0F));
}

inline __m512i sc16_of(const uint8_t* sm) { return _mm512_castsi128_si512(_mm_cvtepu8_epi16(loadl(sm))); }

// ggml's AVX2 order (see q4_k_dots in the AVX2 file): 8 float lanes for the scaled sums, four for
// the min term, reduced (0+2)+(1+3) after the last block.
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
    avx2::prefetch_ahead(x + i);
    uint8_t sm[16];
    unpack_scales_mins(x[i].scales, sm);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    const __m128i mins = _mm_cvtepu8_epi16(loadl(sm + 8));
    float d[NT];
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) {
      d[t] = y[t][i].d * xd;
      const float neg_dmin = -y[t][i].d * xdmin;
      const __m128i min_pairs = _mm_madd_epi16(mins, subblock_sums(y[t][i]));
      acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(neg_dmin), _mm_cvtepi32_ps(min_pairs), acc_m[t]);
      sumi[t] = _mm512_setzero_si512();
    }
    const __m512i sc = sc16_of(sm);
    for (int j = 0; j < 4; ++j) add_pair<NT>(q4_pair(x[i], j), sc, j, y, i, sumi);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d[t]), _mm256_cvtepi32_ps(fold(sumi[t])), acc[t]);
  }
  for (int t = 0; t < NT; ++t) {
    __m128 m = _mm_add_ps(acc_m[t], _mm_movehl_ps(acc_m[t], acc_m[t]));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    out[t] = hsum(acc[t]) + _mm_cvtss_f32(m);
  }
}

// llama.cpp's repacked Q4_K GEMV order (kPairsPerGroup 4; 1 would be the 4-row GEMM's, which
// stays AVX2: its per-pair reductions measured slower here): per group of sub-block pairs one
// exact integer sum and one min sum, each accumulated by one fma (the scalar q4_k_repack_order;
// the AVX2 kernel's vector fmas are the same per-lane single roundings).
template <int kPairsPerGroup, int NT>
void q4_k_repack_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  float acc[NT], acc_min[NT];
  for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    avx2::prefetch_ahead(x + i);
    uint8_t sm[16];
    unpack_scales_mins(x[i].scales, sm);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    const __m128i mins = _mm_cvtepu8_epi16(loadl(sm + 8));
    const __m512i sc = sc16_of(sm);
    float d[NT], dmin[NT];
    alignas(16) int32_t summs[NT][4];
    for (int t = 0; t < NT; ++t) {
      d[t] = xd * y[t][i].d;
      dmin[t] = xdmin * y[t][i].d;
      _mm_store_si128(reinterpret_cast<__m128i*>(summs[t]), _mm_madd_epi16(mins, subblock_sums(y[t][i])));
    }
    for (int g = 0; g < 4; g += kPairsPerGroup) {
      __m512i sumi[NT];
      for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
      for (int j = g; j < g + kPairsPerGroup; ++j) add_pair<NT>(q4_pair(x[i], j), sc, j, y, i, sumi);
      for (int t = 0; t < NT; ++t) {
        int group_mins = 0;
        for (int j = g; j < g + kPairsPerGroup; ++j) group_mins += summs[t][j];
        acc[t] = std::fma(float(hsum_i32(sumi[t])), d[t], acc[t]);
        acc_min[t] = std::fma(float(group_mins), dmin[t], acc_min[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t] - acc_min[t];
}

// The AVX2 Q5_K order: the min term summed as scalar floats block after block, the scaled sums in
// 8 float lanes.
template <int NT>
void q5_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m512i low4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  __m256 acc[NT];
  float mins_sum[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins_sum[t] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    avx2::prefetch_ahead(x + i);
    uint8_t sm[16];
    unpack_scales_mins(x[i].scales, sm);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) {
      const float dmin = y[t][i].d * xdmin;
      int m = 0;
      for (int j = 0; j < 8; ++j) m += sm[8 + j] * (y[t][i].bsums[2 * j] + y[t][i].bsums[2 * j + 1]);
      mins_sum[t] = std::fma(dmin, float(m), mins_sum[t]);
      sumi[t] = _mm512_setzero_si512();
    }
    const __m512i hbits = broadcast32(x[i].qh);
    const __m512i sc = sc16_of(sm);
    for (int j = 0; j < 4; ++j) {
      // Bit 2j of qh[l] is the fifth bit of value l of the low half, bit 2j+1 of the high half.
      const __m512i h = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hbits, halves16(2 * j, 2 * j + 1)), one), 4);
      const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(broadcast32(x[i].qs + 32 * j), halves16(0, 4)), low4);
      add_pair<NT>(_mm512_or_si512(q, h), sc, j, y, i, sumi);
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(fold(sumi[t])), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]) - mins_sum[t];
}

// The AVX2 Q6_K order: unsigned 6-bit products in 8 int32 lanes, the -32 offset taken off per lane
// from Q8_K's 16-value sums, one fma per super-block.
template <int NT>
void q6_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m512i low4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    avx2::prefetch_ahead(x + i);
    const float xd = half_to_f32(x[i].d);
    const __m256i all_scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m512i sc = _mm512_castsi256_si512(all_scales);
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = load64(x[i].ql + 64 * half);
      const __m512i qh = broadcast32(x[i].qh + 32 * half);
      // Groups 0|1 (low nibbles, qh bits 0-1|2-3) and 2|3 (high nibbles, bits 4-5|6-7).
      const __m512i h01 = _mm512_and_si512(_mm512_srlv_epi16(qh, halves16(0, 2)), m3);
      const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(qh, halves16(4, 6)), m3);
      const __m512i v01 = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_slli_epi16(h01, 4));
      const __m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), _mm512_slli_epi16(h23, 4));
      const int b = 8 * half;
      const __m512i s01 = spread16(sc, quarters16(b, b + 1, b + 2, b + 3));
      const __m512i s23 = spread16(sc, quarters16(b + 4, b + 5, b + 6, b + 7));
      for (int t = 0; t < NT; ++t) {
        const int8_t* a = y[t][i].qs + 128 * half;
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(v01, load64(a)), s01);
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(v23, load64(a + 64)), s23);
      }
    }
    for (int t = 0; t < NT; ++t) {
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[t][i].bsums));
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, all_scales), 5);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd),
                               _mm256_cvtepi32_ps(_mm256_sub_epi32(fold(sumi[t]), offset)), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

// The AVX2 Q2_K order (ggml's: the min products fma'd into the same 8 float lanes first, then the
// scaled sums). The 4-bit scales are multiplied into the 2-bit values (a byte each, no carry
// between bytes), so one vpdpbusd per 64 values and row adds the scaled products straight into
// int32 lanes.
template <int NT>
void q2_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m512i m3 = _mm512_set1_epi8(0x03);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    avx2::prefetch_ahead(x + i);
    const float xd = half_to_f32(x[i].d), xdmin = half_to_f32(x[i].dmin);
    const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), _mm_set1_epi8(0x0F)));
    for (int t = 0; t < NT; ++t) {
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[t][i].bsums));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-y[t][i].d * xdmin), _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums)),
                               acc[t]);
    }
    const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc_bytes, _mm_set1_epi8(0x0F))));
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
      const __m512i q2 = broadcast32(x[i].qs + 32 * half);
      for (int s = 0; s < 4; s += 2) {
        const int b = 8 * half + 2 * s;
        const __m512i v = _mm512_and_si512(_mm512_srlv_epi16(q2, halves16(2 * s, 2 * s + 2)), m3);
        const __m512i sv = _mm512_mullo_epi16(v, spread16(sc, quarters16(b, b + 1, b + 2, b + 3)));
        for (int t = 0; t < NT; ++t)
          sumi[t] = _mm512_dpbusd_epi32(sumi[t], sv, load64(y[t][i].qs + 128 * half + 32 * s));
      }
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(fold(sumi[t])), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

// The AVX2 Q3_K order: signed values -4..3 as |v| times the activation with v's sign moved onto
// it, one maddubs, weighted by the signed 16-value scales.
template <int NT>
void q3_k_dots(const void* w, const void* act, size_t act_stride, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = act_row<BlockQ8_K>(act, act_stride, t);
  const __m512i m3 = _mm512_set1_epi8(0x03), one = _mm512_set1_epi8(1), four = _mm512_set1_epi8(4);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    avx2::prefetch_ahead(x + i);
    int8_t scales[16];
    unpack_q3_k_scales(x[i].scales, scales);
    const float xd = half_to_f32(x[i].d);
    const __m512i hbits = broadcast32(x[i].hmask);
    const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales))));
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
      const __m512i q3 = broadcast32(x[i].qs + 32 * half);
      for (int s = 0; s < 4; s += 2) {
        const int group = 4 * half + s;  // groups `group` and `group + 1`: hmask bits of the same number
        const __m512i low = _mm512_and_si512(_mm512_srlv_epi16(q3, halves16(2 * s, 2 * s + 2)), m3);
        const __m512i hset = _mm512_and_si512(_mm512_srlv_epi16(hbits, halves16(group, group + 1)), one);
        const __m512i v = _mm512_sub_epi8(_mm512_or_si512(low, _mm512_slli_epi16(hset, 2)), four);
        const __m512i abs_v = _mm512_abs_epi8(v);
        const __mmask64 neg = _mm512_movepi8_mask(v);
        const int b = 8 * half + 2 * s;
        const __m512i ps = spread16(sc, quarters16(b, b + 1, b + 2, b + 3));
        for (int t = 0; t < NT; ++t) {
          const __m512i a = negate_where(load64(y[t][i].qs + 32 * group), neg);
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(abs_v, a), ps);
        }
      }
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y[t][i].d), _mm256_cvtepi32_ps(fold(sumi[t])), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

}  // namespace

// Installed where measured faster than AVX2 (dispatch_avx512.cpp): the one-row kernels of Q2_K,
// Q4_K and Q6_K, the multi-row ones of all five, and the repacked GEMV order of Q4_K.
float vec_dot_q2_k(const void* w, const void* act, int64_t n) { return one_row<q2_k_dots<1>>(w, act, n); }
float vec_dot_q4_k(const void* w, const void* act, int64_t n) { return one_row<q4_k_dots<1>>(w, act, n); }
float vec_dot_q6_k(const void* w, const void* act, int64_t n) { return one_row<q6_k_dots<1>>(w, act, n); }

#define SLUICE_KQUANT_AVX512_MULTI(name, kernel)                                                  \
  void vec_dot_##name##_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    kernel<2>(w, act, stride, n, out);                                                              \
  }                                                                                                 \
  void vec_dot_##name##_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    kernel<4>(w, act, stride, n, out);                                                              \
  }                                                                                                 \
  void vec_dot_##name##_x8(const void* w, const void* act, size_t stride, int64_t n, float* out) { \
    kernel<8>(w, act, stride, n, out);                                                              \
  }
SLUICE_KQUANT_AVX512_MULTI(q2_k, q2_k_dots)
SLUICE_KQUANT_AVX512_MULTI(q3_k, q3_k_dots)
SLUICE_KQUANT_AVX512_MULTI(q4_k, q4_k_dots)
SLUICE_KQUANT_AVX512_MULTI(q5_k, q5_k_dots)
SLUICE_KQUANT_AVX512_MULTI(q6_k, q6_k_dots)
#undef SLUICE_KQUANT_AVX512_MULTI

float vec_dot_q4_k_repack(const void* w, const void* act, int64_t n) { return one_row<q4_k_repack_dots<4, 1>>(w, act, n); }
void vec_dot_q4_k_repack_x2(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q4_k_repack_dots<4, 2>(w, act, stride, n, out);
}
void vec_dot_q4_k_repack_x4(const void* w, const void* act, size_t stride, int64_t n, float* out) {
  q4_k_repack_dots<4, 4>(w, act, stride, n, out);
}

}  // namespace sluice::kernels::cpu::avx512
