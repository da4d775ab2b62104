// Q4_K in llama.cpp's repacked orders (the 4-row GEMM's and the GEMV's) as a real GEMM: 16
// weight rows at a time, packed once per batch so that each vector lane holds one row.
//
// The one-row kernels keep a row's 256 values across the lanes of a vector, so every float step
// of the order (one per sub-block pair in the GEMM order, one per super-block in the GEMV order)
// costs a horizontal reduction per token; that reduction, not the multiplies, bounded them. Here a
// tile of 16 rows is rewritten (pack) into lane-per-row form: for every 4 consecutive bytes of a
// sub-block pair's 32 nibble bytes, one 64-byte vector holds those 4 bytes of all 16 rows (their
// low nibbles are 4 values of sub-block 2p, their high nibbles the same 4 of 2p+1). One vpdpbusd
// against the token's 4 activation bytes broadcast to every lane then advances all 16 rows, and a
// sub-block's sum for each row is simply its lane: no reduction at all. Scales, mins and the
// super-block factors are unpacked per row into the same lane order, so each lane runs the scalar
// q4_k_repack_order steps exactly: the same exact integers, then acc = fma(float(isum), d, acc)
// and acc_min likewise per group, d the same float product, out = acc - acc_min. Every output
// equals vec_dot_repack_gemm's (GEMM order) or vec_dot_repack's (GEMV order) to the bit.
#include "kernels/cpu/avx512_common.h"  // first: its warning pragma must precede <immintrin.h>

#include <cstddef>
#include <cstring>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

constexpr int kRows = 16;
constexpr int64_t kPrefetchBlocks = 4;

// One super-block column of a 16-row tile, lane r = row r.
struct PackedQ4KBlock {
  float d[kRows];             // the row's super-block scale
  float dmin[kRows];          // and min scale
  uint32_t sm[4][kRows];      // scales 0-3, 4-7, mins 0-3, 4-7 (a byte each), as unpack_scales_mins
  uint32_t q[4][8][kRows];    // [pair][4-byte step][row]: the row's nibble bytes 4k..4k+3 of pair p
};
static_assert(sizeof(PackedQ4KBlock) == kQ4KTileBlockBytes);

// Q4_K's 12 packed scale bytes of 16 rows (three dwords per lane) -> per lane the 8 scales
// (sm[0], sm[1]) and 8 mins (sm[2], sm[3]), a byte each: scale_min_k4's bits, four at a time.
inline void unpack_scales_mins(__m512i u0, __m512i u1, __m512i u2, __m512i sm[4]) {
  const __m512i low6 = _mm512_set1_epi32(0x3f3f3f3f), low4 = _mm512_set1_epi32(0x0f0f0f0f),
                low2 = _mm512_set1_epi32(0x03030303);
  auto high2 = [&](__m512i u) { return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 6), low2), 4); };
  sm[0] = _mm512_and_si512(u0, low6);
  sm[1] = _mm512_or_si512(_mm512_and_si512(u2, low4), high2(u0));
  sm[2] = _mm512_and_si512(u1, low6);
  sm[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), low4), high2(u1));
}

// v[r] = row r's 16 dwords -> v[c] = dword c of rows 0..15 (unpacks within 128-bit lanes, then
// 128-bit lanes across the four groups of four rows).
inline void transpose16(__m512i v[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  // u[4g + j], lane L: dword 4L + j of rows 4g..4g+3.
  __m512i u[16];
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), b = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    v[j] = _mm512_shuffle_i32x4(a, c, 0x88);       // lane 0
    v[4 + j] = _mm512_shuffle_i32x4(a, c, 0xDD);   // lane 1
    v[8 + j] = _mm512_shuffle_i32x4(b, d, 0x88);   // lane 2
    v[12 + j] = _mm512_shuffle_i32x4(b, d, 0xDD);  // lane 3
  }
}

template <bool kGemmOrder, int NT>
void gemm_tile(const std::byte* packed, const void* act, size_t act_stride, int64_t n, float* out,
               size_t out_stride) {
  const auto* blocks = reinterpret_cast<const PackedQ4KBlock*>(packed);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t)
    y[t] = reinterpret_cast<const BlockQ8_K*>(static_cast<const std::byte*>(act) + size_t(t) * act_stride);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NT], acc_min[NT];
  for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const PackedQ4KBlock& p = blocks[i];
    __m512i isum_all[NT], summs_all[NT];  // the GEMV order's one group: the whole super-block
    for (int t = 0; t < NT; ++t) isum_all[t] = summs_all[t] = _mm512_setzero_si512();
    for (int pair = 0; pair < 4; ++pair) {
      __m512i even[NT], odd[NT];
      for (int t = 0; t < NT; ++t) even[t] = odd[t] = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        const __m512i v = _mm512_loadu_si512(p.q[pair][k]);
        const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        for (int t = 0; t < NT; ++t) {
          const int8_t* q8 = y[t][i].qs + 64 * pair + 4 * k;
          int32_t a_even, a_odd;
          std::memcpy(&a_even, q8, 4);
          std::memcpy(&a_odd, q8 + 32, 4);
          even[t] = _mm512_dpbusd_epi32(even[t], lo, _mm512_set1_epi32(a_even));
          odd[t] = _mm512_dpbusd_epi32(odd[t], hi, _mm512_set1_epi32(a_odd));
        }
      }
      // Sub-blocks 2p and 2p+1 are bytes 2(p % 2) and 2(p % 2) + 1 of their scale and min words.
      const __m512i low8 = _mm512_set1_epi32(0xFF);
      const __m512i sc = _mm512_srli_epi32(_mm512_loadu_si512(p.sm[pair / 2]), 16 * (pair % 2));
      const __m512i sc_even = _mm512_and_si512(sc, low8), sc_odd = _mm512_and_si512(_mm512_srli_epi32(sc, 8), low8);
      // The pair's min term m[2p] * (activation sum of sub-block 2p) + m[2p+1] * (... 2p+1): one
      // vpmaddwd of the rows' two mins (int16 halves) with the token's two sums (each within +-4096).
      const __m512i m = _mm512_srli_epi32(_mm512_loadu_si512(p.sm[2 + pair / 2]), 16 * (pair % 2));
      const __m512i mins = _mm512_or_si512(_mm512_and_si512(m, low8),
                                           _mm512_slli_epi32(_mm512_and_si512(m, _mm512_set1_epi32(0xFF00)), 8));
      for (int t = 0; t < NT; ++t) {
        const int16_t* bs = y[t][i].bsums + 4 * pair;
        const uint32_t s_even = uint16_t(int16_t(bs[0] + bs[1])), s_odd = uint16_t(int16_t(bs[2] + bs[3]));
        const __m512i summs = _mm512_madd_epi16(mins, _mm512_set1_epi32(int32_t(s_even | (s_odd << 16))));
        const __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(even[t], sc_even), _mm512_mullo_epi32(odd[t], sc_odd));
        if constexpr (kGemmOrder) {
          const __m512 yd = _mm512_set1_ps(y[t][i].d);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_loadu_ps(p.d), yd), acc[t]);
          acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summs), _mm512_mul_ps(_mm512_loadu_ps(p.dmin), yd), acc_min[t]);
        } else {
          isum_all[t] = _mm512_add_epi32(isum_all[t], isum);
          summs_all[t] = _mm512_add_epi32(summs_all[t], summs);
        }
      }
    }
    if constexpr (!kGemmOrder) {
      for (int t = 0; t < NT; ++t) {
        const __m512 yd = _mm512_set1_ps(y[t][i].d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum_all[t]), _mm512_mul_ps(_mm512_loadu_ps(p.d), yd), acc[t]);
        acc_min[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(summs_all[t]), _mm512_mul_ps(_mm512_loadu_ps(p.dmin), yd), acc_min[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + size_t(t) * out_stride, _mm512_sub_ps(acc[t], acc_min[t]));
}

}  // namespace

void pack_q4_k_tile(const std::byte* rows, size_t row_stride, int64_t n, std::byte* packed) {
  auto* out = reinterpret_cast<PackedQ4KBlock*>(packed);
  // Byte offsets of the 16 rows (a tile's rows are at most 16 row strides apart: int32 is enough
  // for any row the GGUF reader accepts).
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                 _mm512_set1_epi32(int32_t(row_stride)));
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    PackedQ4KBlock& p = out[i];
    const std::byte* column = rows + size_t(i) * sizeof(BlockQ4_K);
    // The pack is the batch's first touch of these weights: ask for a column a few blocks ahead
    // (16 separate row streams are more than the hardware prefetcher follows).
    if (i + kPrefetchBlocks < n / kQK_K)
      for (int r = 0; r < kRows; ++r)
        for (size_t b = 0; b < sizeof(BlockQ4_K); b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(column + size_t(r) * row_stride + kPrefetchBlocks * sizeof(BlockQ4_K) + b),
                       _MM_HINT_T0);
    // d and dmin are the block's first 4 bytes: one gather, then each half widened exactly.
    const __m512i dd = _mm512_i32gather_epi32(row_offsets, column, 1);
    _mm512_storeu_ps(p.d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
    _mm512_storeu_ps(p.dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
    const std::byte* scales = column + offsetof(BlockQ4_K, scales);
    __m512i sm[4];
    unpack_scales_mins(_mm512_i32gather_epi32(row_offsets, scales, 1), _mm512_i32gather_epi32(row_offsets, scales + 4, 1),
                       _mm512_i32gather_epi32(row_offsets, scales + 8, 1), sm);
    for (int w = 0; w < 4; ++w) _mm512_storeu_si512(p.sm[w], sm[w]);
    // The nibble bytes: each half (two pairs, 16 dwords per row) is a 16 x 16 dword transpose.
    const std::byte* qs = column + offsetof(BlockQ4_K, qs);
    for (int half = 0; half < 2; ++half) {
      __m512i v[kRows];
      for (int r = 0; r < kRows; ++r) v[r] = _mm512_loadu_si512(qs + size_t(r) * row_stride + 64 * half);
      transpose16(v);
      for (int c = 0; c < 16; ++c) _mm512_storeu_si512(p.q[2 * half + c / 8][c % 8], v[c]);
    }
  }
}

namespace {
template <bool kGemmOrder>
void gemm_tile_tokens(const std::byte* packed, const void* act, size_t act_stride, int64_t n, int n_tokens, float* out,
                      size_t out_stride) {
  switch (n_tokens) {
    case 1: return gemm_tile<kGemmOrder, 1>(packed, act, act_stride, n, out, out_stride);
    case 2: return gemm_tile<kGemmOrder, 2>(packed, act, act_stride, n, out, out_stride);
    case 3: return gemm_tile<kGemmOrder, 3>(packed, act, act_stride, n, out, out_stride);
    default: return gemm_tile<kGemmOrder, 4>(packed, act, act_stride, n, out, out_stride);
  }
}
}  // namespace

void gemm_q4_k_tile(const std::byte* packed, const void* act, size_t act_stride, int64_t n, int n_tokens, float* out,
                    size_t out_stride) {
  gemm_tile_tokens<true>(packed, act, act_stride, n, n_tokens, out, out_stride);
}

void gemv_order_q4_k_tile(const std::byte* packed, const void* act, size_t act_stride, int64_t n, int n_tokens,
                          float* out, size_t out_stride) {
  gemm_tile_tokens<false>(packed, act, act_stride, n, n_tokens, out, out_stride);
}

}  // namespace sluice::kernels::cpu::avx512
