// The avx2 level's tinyBLAS-order attention products: attention_tinyblas_*_impl.h built with
// -mavx2 -mfma -mf16c, where std::fma is one instruction and F16C widens 8 values at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels::cpu::avx2 {

namespace {
inline float widen_one(uint16_t h) { return half_to_f32(h); }
void widen_f16(const uint16_t* src, float* dst, int64_t m) {
  int64_t i = 0;
  for (; i + 8 <= m; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < m; ++i) dst[i] = half_to_f32(src[i]);
}
// The GEMM over a transposed group with 8-lane registers: a 16-lane accumulator is two (lanes 0-7,
// 8-15), each FMA the same as the plain loop's per lane. 2 channels x 3 outputs: 12 accumulators,
// 4 value and (one output at a time) 2 weight registers of the 16.
template <int NC, int NG>
void lanes_block(const float* vt, const float* w_vec, int64_t kChunks, int64_t n_chunks, int64_t ch, int g,
                 float* const* lanes) {
  __m256 acc[NC][NG][2];
  for (int a = 0; a < NC; ++a)
    for (int b = 0; b < NG; ++b)
      for (int h = 0; h < 2; ++h) acc[a][b][h] = _mm256_loadu_ps(lanes[g + b] + (ch + a) * 16 + 8 * h);
  for (int64_t k = 0; k < n_chunks; ++k) {
    __m256 v[NC][2];
    for (int a = 0; a < NC; ++a)
      for (int h = 0; h < 2; ++h) v[a][h] = _mm256_loadu_ps(vt + ((ch + a) * kChunks + k) * 16 + 8 * h);
    for (int b = 0; b < NG; ++b)
      for (int h = 0; h < 2; ++h) {
        const __m256 w = _mm256_loadu_ps(w_vec + ((g + b) * kChunks + k) * 16 + 8 * h);
        for (int a = 0; a < NC; ++a) acc[a][b][h] = _mm256_fmadd_ps(v[a][h], w, acc[a][b][h]);
      }
  }
  for (int a = 0; a < NC; ++a)
    for (int b = 0; b < NG; ++b)
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(lanes[g + b] + (ch + a) * 16 + 8 * h, acc[a][b][h]);
}

template <int NC>
void lanes_channels(const float* vt, const float* w_vec, int64_t kChunks, int64_t n_chunks, int64_t ch, int n_out,
                    float* const* lanes) {
  int g = 0;
  for (; g + 3 <= n_out; g += 3) lanes_block<NC, 3>(vt, w_vec, kChunks, n_chunks, ch, g, lanes);
  for (; g < n_out; ++g) lanes_block<NC, 1>(vt, w_vec, kChunks, n_chunks, ch, g, lanes);
}

// 8 cells x 8 channels widened rows (r[l]: cell l's 8 channels) to 8 channels x 8 cells.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 8; g += 4) {  // u[g + s]: columns s and s + 4 of rows g..g+3
    u[g + 0] = _mm256_shuffle_ps(t[g + 0], t[g + 2], 0x44);
    u[g + 1] = _mm256_shuffle_ps(t[g + 0], t[g + 2], 0xEE);
    u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int s = 0; s < 4; ++s) {
    r[s] = _mm256_permute2f128_ps(u[s], u[4 + s], 0x20);
    r[s + 4] = _mm256_permute2f128_ps(u[s], u[4 + s], 0x31);
  }
}

#define TB_OWN_TRANSPOSE
void transpose_chunk(const uint16_t* const* src, int64_t n, float* vt, int64_t vt_stride) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
      for (int l = 0; l < 8; ++l) {
        const uint16_t* p = src[8 * half + l];
        r[l] = p ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))) : _mm256_setzero_ps();
      }
      transpose8(r);
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(vt + (i + c) * vt_stride + 8 * half, r[c]);
    }
  for (; i < n; ++i)
    for (int l = 0; l < 16; ++l) vt[i * vt_stride + l] = src[l] ? half_to_f32(src[l][i]) : 0.0f;
}

#define TB_OWN_LANES_GEMM
void lanes_gemm(const float* vt, const float* w_vec, int64_t kChunks, int64_t n_chunks, int64_t n, int n_out,
                float* const* lanes) {
  int64_t ch = 0;
  for (; ch + 2 <= n; ch += 2) lanes_channels<2>(vt, w_vec, kChunks, n_chunks, ch, n_out, lanes);
  for (; ch < n; ++ch) lanes_channels<1>(vt, w_vec, kChunks, n_chunks, ch, n_out, lanes);
}

}  // namespace

#include "kernels/cpu/attention_tinyblas_scores_impl.h"
#include "kernels/cpu/attention_tinyblas_values_impl.h"

}  // namespace sluice::kernels::cpu::avx2
