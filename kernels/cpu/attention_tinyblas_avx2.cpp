// The avx2 level's tinyBLAS-order attention products: attention_tinyblas_impl.h built with
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

#define TB_OWN_LANES_GEMM
void lanes_gemm(const float* vt, const float* w_vec, int64_t kChunks, int64_t n_chunks, int64_t n, int n_out,
                float* const* lanes) {
  int64_t ch = 0;
  for (; ch + 2 <= n; ch += 2) lanes_channels<2>(vt, w_vec, kChunks, n_chunks, ch, n_out, lanes);
  for (; ch < n; ++ch) lanes_channels<1>(vt, w_vec, kChunks, n_chunks, ch, n_out, lanes);
}

}  // namespace

#include "kernels/cpu/attention_tinyblas_impl.h"

}  // namespace sluice::kernels::cpu::avx2
