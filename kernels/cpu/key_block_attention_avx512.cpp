// The key-block attention kernels' AVX-512 level: the plain bodies' fma chains
// (key_block_attention_impl.h), register-tiled so that each load or F16 widening feeds several
// accumulators. The tiles (16 accumulators of the 32 registers):
//   key decompression: 8 channels x 2 blocks of 16 cells, each input row loaded once for 8 weights;
//   value decompression: 4 cells x 64 channels, each weight row loaded once for 4 cells;
//   scores: 8 query rows x 2 key blocks, each widened key row used by 8 queries;
//   weighted values: 4 query rows x 64 channels, each widened value row used by 4 queries.
// Which lane holds which output and the order of every chain are the plain bodies', so the bits are.
#include "kernels/cpu/avx512_common.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_avx512.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

inline __m512 widen(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline void narrow(__m512 x, uint16_t* p) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

// Every tile's accumulators start at +0 (each output's fma chain starts there).
template <int A, int B>
inline void zero(__m512 (&acc)[A][B]) {
  for (int a = 0; a < A; ++a)
    for (int b = 0; b < B; ++b) acc[a][b] = _mm512_setzero_ps();
}

template <int NB, int NI>
void key_tile(const float* lt, int64_t b, int64_t n_in, const float* wt, size_t wt_stride, int64_t i, uint16_t* kt,
              size_t kt_block_stride) {
  __m512 acc[NB][NI];
  zero(acc);
  const float* x = lt + size_t(b * n_in) * 16;
  for (int64_t l = 0; l < n_in; ++l) {
    __m512 xv[NB];
    for (int bb = 0; bb < NB; ++bb) xv[bb] = _mm512_loadu_ps(x + size_t(bb * n_in + l) * 16);
    const float* w = wt + size_t(l) * wt_stride + size_t(i);
    for (int ii = 0; ii < NI; ++ii) {
      const __m512 wv = _mm512_set1_ps(w[ii]);
      for (int bb = 0; bb < NB; ++bb) acc[bb][ii] = _mm512_fmadd_ps(wv, xv[bb], acc[bb][ii]);
    }
  }
  for (int bb = 0; bb < NB; ++bb)
    for (int ii = 0; ii < NI; ++ii) narrow(acc[bb][ii], kt + size_t(b + bb) * kt_block_stride + size_t(i + ii) * 16);
}

template <int NB>
void key_rows(const float* lt, int64_t b, int64_t n_in, const float* wt, size_t wt_stride, int64_t d, uint16_t* kt,
              size_t kt_block_stride) {
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) key_tile<NB, 8>(lt, b, n_in, wt, wt_stride, i, kt, kt_block_stride);
  for (; i < d; ++i) key_tile<NB, 1>(lt, b, n_in, wt, wt_stride, i, kt, kt_block_stride);
}

void decompress_keys(const float* lt, int64_t n_blocks, int64_t n_in, const float* wt, size_t wt_stride, int64_t d,
                     uint16_t* kt, size_t kt_block_stride) {
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) key_rows<2>(lt, b, n_in, wt, wt_stride, d, kt, kt_block_stride);
  if (b < n_blocks) key_rows<1>(lt, b, n_in, wt, wt_stride, d, kt, kt_block_stride);
}

template <int NJ, int NC>
void value_tile(const float* lt, int64_t j, int64_t n_in, const float* wt, size_t wt_stride, int64_t i0, uint16_t* v,
                size_t v_stride) {
  __m512 acc[NJ][NC];
  zero(acc);
  const float* x[NJ];
  for (int jj = 0; jj < NJ; ++jj) x[jj] = lt + size_t(((j + jj) / 16) * n_in) * 16 + size_t((j + jj) % 16);
  for (int64_t l = 0; l < n_in; ++l) {
    const float* w = wt + size_t(l) * wt_stride + size_t(i0);
    __m512 wv[NC];
    for (int cc = 0; cc < NC; ++cc) wv[cc] = _mm512_loadu_ps(w + cc * 16);
    for (int jj = 0; jj < NJ; ++jj) {
      const __m512 xv = _mm512_set1_ps(x[jj][l * 16]);
      for (int cc = 0; cc < NC; ++cc) acc[jj][cc] = _mm512_fmadd_ps(xv, wv[cc], acc[jj][cc]);
    }
  }
  for (int jj = 0; jj < NJ; ++jj)
    for (int cc = 0; cc < NC; ++cc) narrow(acc[jj][cc], v + size_t(j + jj) * v_stride + size_t(i0 + cc * 16));
}

template <int NJ>
void value_cells(const float* lt, int64_t j, int64_t n_in, const float* wt, size_t wt_stride, int64_t d, uint16_t* v,
                 size_t v_stride) {
  int64_t i0 = 0;
  for (; i0 + 64 <= d; i0 += 64) value_tile<NJ, 4>(lt, j, n_in, wt, wt_stride, i0, v, v_stride);
  for (; i0 < d; i0 += 16) value_tile<NJ, 1>(lt, j, n_in, wt, wt_stride, i0, v, v_stride);
}

void decompress_values(const float* lt, int64_t n_cells, int64_t n_in, const float* wt, size_t wt_stride, int64_t d,
                       uint16_t* v, size_t v_stride) {
  int64_t j = 0;
  for (; j + 4 <= n_cells; j += 4) value_cells<4>(lt, j, n_in, wt, wt_stride, d, v, v_stride);
  switch (n_cells - j) {
    case 3: value_cells<3>(lt, j, n_in, wt, wt_stride, d, v, v_stride); break;
    case 2: value_cells<2>(lt, j, n_in, wt, wt_stride, d, v, v_stride); break;
    case 1: value_cells<1>(lt, j, n_in, wt, wt_stride, d, v, v_stride); break;
    default: break;
  }
}

template <int NR, int NB>
void score_tile(const uint16_t* kt, size_t kt_block_stride, int64_t b, int64_t d, const float* const* q, float scale,
                float* const* out) {
  __m512 acc[NR][NB];
  zero(acc);
  const uint16_t* k = kt + size_t(b) * kt_block_stride;
  for (int64_t i = 0; i < d; ++i) {
    __m512 kv[NB];
    for (int bb = 0; bb < NB; ++bb) kv[bb] = widen(k + size_t(bb) * kt_block_stride + size_t(i) * 16);
    for (int r = 0; r < NR; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r][i]);
      for (int bb = 0; bb < NB; ++bb) acc[r][bb] = _mm512_fmadd_ps(kv[bb], qv, acc[r][bb]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int r = 0; r < NR; ++r)
    for (int bb = 0; bb < NB; ++bb) _mm512_storeu_ps(out[r] + (b + bb) * 16, _mm512_mul_ps(s, acc[r][bb]));
}

template <int NR>
void score_blocks(const uint16_t* kt, size_t kt_block_stride, int64_t n_blocks, int64_t d, const float* const* q,
                  float scale, float* const* out) {
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) score_tile<NR, 2>(kt, kt_block_stride, b, d, q, scale, out);
  if (b < n_blocks) score_tile<NR, 1>(kt, kt_block_stride, b, d, q, scale, out);
}

void scores(const uint16_t* kt, size_t kt_block_stride, int64_t n_blocks, int64_t d, const float* const* q, int n_q,
            float scale, float* const* out) {
  for (int r = 0; r < n_q; r += 8) {
    switch (std::min(8, n_q - r)) {
      case 8: score_blocks<8>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
      case 7: score_blocks<7>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
      case 6: score_blocks<6>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
      case 5: score_blocks<5>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
      case 4: score_blocks<4>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
      case 3: score_blocks<3>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
      case 2: score_blocks<2>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
      default: score_blocks<1>(kt, kt_block_stride, n_blocks, d, q + r, scale, out + r); break;
    }
  }
}

inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

float softmax_chunk(float* s, int64_t n, float* max, float* lanes) {
  const float inf = std::numeric_limits<float>::infinity();
  __m512 mv = _mm512_set1_ps(*max);
  for (int64_t j = 0; j < n; j += 16)
    mv = _mm512_mask_max_ps(mv, tail_mask(n - j), mv, _mm512_maskz_loadu_ps(tail_mask(n - j), s + j));
  const float m = std::max(*max, _mm512_reduce_max_ps(mv));
  const float alpha = *max == -inf ? 0.0f : _mm512_cvtss_f32(ggml_v_expf(_mm512_set1_ps(*max - m)));
  __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(lanes), _mm512_set1_ps(alpha));
  const __m512 mm = _mm512_set1_ps(m);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = tail_mask(n - j);
    const __m512 e = ggml_v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mm));
    _mm512_mask_storeu_ps(s + j, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
  }
  _mm512_storeu_ps(lanes, acc);
  *max = m;
  return alpha;
}

template <int NR, int NC>
void weighted_tile(const uint16_t* v, size_t v_stride, int64_t n_cells, int64_t i0, const float* const* w,
                   float* const* out) {
  __m512 acc[NR][NC];
  for (int r = 0; r < NR; ++r)
    for (int cc = 0; cc < NC; ++cc) acc[r][cc] = _mm512_loadu_ps(out[r] + i0 + cc * 16);
  for (int64_t j = 0; j < n_cells; ++j) {
    __m512 vv[NC];
    for (int cc = 0; cc < NC; ++cc) vv[cc] = widen(v + size_t(j) * v_stride + size_t(i0 + cc * 16));
    for (int r = 0; r < NR; ++r) {
      const __m512 wv = _mm512_set1_ps(w[r][j]);
      for (int cc = 0; cc < NC; ++cc) acc[r][cc] = _mm512_fmadd_ps(vv[cc], wv, acc[r][cc]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int cc = 0; cc < NC; ++cc) _mm512_storeu_ps(out[r] + i0 + cc * 16, acc[r][cc]);
}

template <int NR>
void weighted_rows(const uint16_t* v, size_t v_stride, int64_t n_cells, int64_t d, const float* const* w,
                   float* const* out) {
  int64_t i0 = 0;
  for (; i0 + 64 <= d; i0 += 64) weighted_tile<NR, 4>(v, v_stride, n_cells, i0, w, out);
  for (; i0 < d; i0 += 16) weighted_tile<NR, 1>(v, v_stride, n_cells, i0, w, out);
}

void add_weighted(const uint16_t* v, size_t v_stride, int64_t n_cells, int64_t d, const float* const* w, int n_w,
                  float* const* out) {
  for (int r = 0; r < n_w; r += 4) {
    switch (std::min(4, n_w - r)) {
      case 4: weighted_rows<4>(v, v_stride, n_cells, d, w + r, out + r); break;
      case 3: weighted_rows<3>(v, v_stride, n_cells, d, w + r, out + r); break;
      case 2: weighted_rows<2>(v, v_stride, n_cells, d, w + r, out + r); break;
      default: weighted_rows<1>(v, v_stride, n_cells, d, w + r, out + r); break;
    }
  }
}

}  // namespace

KeyBlockKernels key_block_kernels() {
  return {decompress_keys, decompress_values, scores, softmax_chunk, add_weighted};
}

}  // namespace sluice::kernels::cpu::avx512
