// Q4_K in llama.cpp's repacked 4-row GEMM order, as a real GEMM: 16 weight rows at a time, packed
// once per batch so that each vector lane holds one row.
//
// The one-row kernels keep a row's 256 values across the lanes of a vector, so every sub-block
// pair of the GEMM order (one float step per pair) costs a horizontal reduction per token; that
// reduction, not the multiplies, bounded them. Here a tile of 16 rows is rewritten (pack) into
// lane-per-row form: for every 4 consecutive values of a sub-block, one 64-byte vector holds those
// 4 unsigned nibbles of all 16 rows. One vpdpbusd against the token's 4 activation bytes broadcast
// to every lane then advances all 16 rows at once, and a sub-block's sum for each row is simply its
// lane: no reduction at all. The scales, mins and super-block factors are unpacked per row into the
// same lane order, so each lane then runs the scalar q4_k_repack_order<2> steps exactly: the same
// exact integers, then per pair acc = fma(float(isum), d, acc) and acc_min likewise, d the same
// float product, and out = acc - acc_min. Every output equals vec_dot_repack_gemm's to the bit.
#include "kernels/cpu/avx512_common.h"  // first: its warning pragma must precede <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

constexpr int kRows = 16;

// One super-block column of a 16-row tile, lane r = row r.
struct PackedQ4KBlock {
  float d[kRows];              // the row's super-block scale
  float dmin[kRows];           // and min scale
  int32_t scales[8][kRows];    // sub-block scales
  int32_t min_pairs[4][kRows]; // sub-block pair p's two mins as int16 (low: 2p, high: 2p+1)
  uint8_t q[8][8][kRows][4];   // [sub-block][4-value step][row][value]: nibbles widened to bytes
};
static_assert(sizeof(PackedQ4KBlock) == kQ4KTileBlockBytes);

}  // namespace

void pack_q4_k_tile(const std::byte* rows, size_t row_stride, int64_t n, std::byte* packed) {
  auto* out = reinterpret_cast<PackedQ4KBlock*>(packed);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    PackedQ4KBlock& p = out[i];
    for (int r = 0; r < kRows; ++r) {
      const auto& x = reinterpret_cast<const BlockQ4_K*>(rows + size_t(r) * row_stride)[i];
      p.d[r] = fp16_to_f32(x.d);
      p.dmin[r] = fp16_to_f32(x.dmin);
      uint8_t sc[8], m[8];
      for (int j = 0; j < 8; ++j) {
        scale_min_k4(j, x.scales, &sc[j], &m[j]);
        p.scales[j][r] = sc[j];
      }
      for (int q = 0; q < 4; ++q) p.min_pairs[q][r] = int32_t(uint32_t(m[2 * q]) | (uint32_t(m[2 * q + 1]) << 16));
      for (int j = 0; j < 8; ++j) {
        const uint8_t* q4 = x.qs + 32 * (j / 2);
        for (int l = 0; l < 32; ++l)
          p.q[j][l / 4][r][l % 4] = uint8_t(j % 2 == 0 ? (q4[l] & 0xF) : (q4[l] >> 4));
      }
    }
  }
}

void gemm_q4_k_tile(const std::byte* packed, const void* act, size_t act_stride, int64_t n, float* out,
                    size_t out_stride) {
  constexpr int NT = kQ4KTileTokens;
  const auto* blocks = reinterpret_cast<const PackedQ4KBlock*>(packed);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t)
    y[t] = reinterpret_cast<const BlockQ8_K*>(static_cast<const std::byte*>(act) + size_t(t) * act_stride);
  __m512 acc[NT], acc_min[NT];
  for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const PackedQ4KBlock& p = blocks[i];
    const __m512 xd = _mm512_loadu_ps(p.d), xdmin = _mm512_loadu_ps(p.dmin);
    __m512 d[NT], dmin[NT];
    for (int t = 0; t < NT; ++t) {
      const __m512 yd = _mm512_set1_ps(y[t][i].d);
      d[t] = _mm512_mul_ps(xd, yd);
      dmin[t] = _mm512_mul_ps(xdmin, yd);
    }
    for (int pair = 0; pair < 4; ++pair) {
      __m512i isum[NT];
      for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
      for (int j = 2 * pair; j < 2 * pair + 2; ++j) {
        __m512i sub[NT];
        for (int t = 0; t < NT; ++t) sub[t] = _mm512_setzero_si512();
        for (int k = 0; k < 8; ++k) {
          const __m512i w = _mm512_loadu_si512(p.q[j][k]);
          for (int t = 0; t < NT; ++t) {
            int32_t a;
            std::memcpy(&a, y[t][i].qs + 32 * j + 4 * k, 4);
            sub[t] = _mm512_dpbusd_epi32(sub[t], w, _mm512_set1_epi32(a));
          }
        }
        const __m512i sc = _mm512_loadu_si512(p.scales[j]);
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(sub[t], sc));
      }
      // The pair's min term m[2p] * (activation sum of sub-block 2p) + m[2p+1] * (... 2p+1): one
      // vpmaddwd of the rows' int16 min pairs with the token's two sums (each within +-4096).
      const __m512i mins = _mm512_loadu_si512(p.min_pairs[pair]);
      for (int t = 0; t < NT; ++t) {
        const int16_t* bs = y[t][i].bsums + 4 * pair;
        const uint32_t s_even = uint16_t(int16_t(bs[0] + bs[1])), s_odd = uint16_t(int16_t(bs[2] + bs[3]));
        const __m512i summs = _mm512_madd_epi16(mins, _mm512_set1_epi32(int32_t(s_even | (s_odd << 16))));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), d[t], acc[t]);
        acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summs), dmin[t], acc_min[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + size_t(t) * out_stride, _mm512_sub_ps(acc[t], acc_min[t]));
}

}  // namespace sluice::kernels::cpu::avx512
