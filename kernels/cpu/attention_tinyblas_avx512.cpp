// The avx512 level's tinyBLAS-order attention products (dispatch.h), register-tiled: equal to
// attention_tinyblas_impl.h's bodies bit for bit. Every product and sum is the same fma in the same
// lane and order; only which outputs share a load changed.
//   scores: 4 query rows x 4 key rows of 16-lane accumulators (16 of the 32 registers), each key
//           row widened once per 16-value step for the 4 query rows;
//   values: a GEMM over the value rows transposed in registers, 4 channels x 4 outputs of 16-lane
//           accumulators (see fma_f16_lanes below).
#include "kernels/cpu/avx512_common.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels::cpu::avx512 {

namespace {

constexpr int64_t kMaxScoreLen = 1024;  // widened q rows kept on the stack (longer rows: avx2's body)
constexpr int kScoreQ = 4, kScoreRows = 4;

inline float lane_sum(__m512 v) {
  alignas(64) float a[16];
  _mm512_store_ps(a, v);
  return ::sluice::kernels::detail::reduce_add_16(a);  // _mm512_reduce_add_ps's order, on every compiler
}

template <int NQ, int NR>
void score_tile(const std::byte* rows, size_t row_stride, int64_t j, int64_t n, const float* const* qf, float* const* out) {
  __m512 acc[NQ][NR];
  for (int h = 0; h < NQ; ++h)
    for (int r = 0; r < NR; ++r) acc[h][r] = _mm512_setzero_ps();
  const std::byte* row0 = rows + size_t(j) * row_stride;
  for (int64_t l = 0; l < n; l += 16) {
    __m512 k[NR];
    for (int r = 0; r < NR; ++r)
      k[r] = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row0 + size_t(r) * row_stride + size_t(l) * 2)));
    for (int h = 0; h < NQ; ++h) {
      const __m512 q = _mm512_loadu_ps(qf[h] + l);
      for (int r = 0; r < NR; ++r) acc[h][r] = _mm512_fmadd_ps(k[r], q, acc[h][r]);
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int r = 0; r < NR; ++r) out[h][j + r] = lane_sum(acc[h][r]);
}

template <int NQ>
void score_rows(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const float* const* qf,
                float* const* out) {
  int64_t j = 0;
  for (; j + kScoreRows <= n_rows; j += kScoreRows) score_tile<NQ, kScoreRows>(rows, row_stride, j, n, qf, out);
  for (; j < n_rows; ++j) score_tile<NQ, 1>(rows, row_stride, j, n, qf, out);
}

// Values: V^T kq as a GEMM over a transposed tile. A group of up to kTbVtCells cells is widened
// and transposed (16x16 blocks in registers) into vt[chunk][channel][16 cells]; then 4 channels x
// 4 outputs of 16-lane accumulators (a channel's lane l holds the cells c % 16 == l, as tinyBLAS's)
// take one FMA per (channel, output) per 16 cells. Cells outside [first_cell, end) are zeros with
// zero weights: fma(0, 0, acc) leaves acc as it is (an accumulator that starts at +0 never holds -0).
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // rows g..g+3: u[g + s] holds columns s, s+4, s+8, s+12
    u[g + 0] = _mm512_shuffle_ps(t[g + 0], t[g + 2], 0x44);
    u[g + 1] = _mm512_shuffle_ps(t[g + 0], t[g + 2], 0xEE);
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int s = 0; s < 4; ++s) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[0 + s], u[4 + s], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[0 + s], u[4 + s], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], 0xDD);
    r[s] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[s + 8] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[s + 4] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[s + 12] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

constexpr int kValueChannels = 4, kValueOuts = 4;

template <int NC, int NG>
void value_gemm(const float* vt, size_t chunk_stride, int64_t n_chunks, int64_t ch, const float* w_of_chunk,
                int64_t g0, float* const* lanes) {
  __m512 acc[NC][NG];
  for (int m = 0; m < NC; ++m)
    for (int q = 0; q < NG; ++q) acc[m][q] = _mm512_loadu_ps(lanes[g0 + q] + size_t(ch + m) * 16);
  for (int64_t k = 0; k < n_chunks; ++k) {
    // vt: channel-major, each channel's chunks contiguous; w: output-major the same way, so each
    // of the 4 + 4 streams walks forward (chunks of one channel 4 KiB apart alias in L1).
    const float* v = vt + (size_t(ch) * chunk_stride + size_t(k)) * 16;
    const float* wk = w_of_chunk + (size_t(g0) * chunk_stride + size_t(k)) * 16;
    __m512 w[NG];
    for (int q = 0; q < NG; ++q) w[q] = _mm512_loadu_ps(wk + size_t(q) * chunk_stride * 16);
    for (int m = 0; m < NC; ++m) {
      const __m512 vm = _mm512_loadu_ps(v + size_t(m) * chunk_stride * 16);
      for (int q = 0; q < NG; ++q) acc[m][q] = _mm512_fmadd_ps(vm, w[q], acc[m][q]);
    }
  }
  for (int m = 0; m < NC; ++m)
    for (int q = 0; q < NG; ++q) _mm512_storeu_ps(lanes[g0 + q] + size_t(ch + m) * 16, acc[m][q]);
}

// Channels 16 at a time (their transposed values, 64 bytes a chunk, stay in L1 for every output);
// within them, outputs 4 at a time (their weights stay in L1 for the 16 channels).
template <int NG>
void value_gemm_channels(const float* vt, size_t chunk_stride, int64_t n_chunks, int64_t ch0, int64_t ch1,
                         const float* w, int64_t g0, float* const* lanes) {
  int64_t ch = ch0;
  for (; ch + kValueChannels <= ch1; ch += kValueChannels)
    value_gemm<kValueChannels, NG>(vt, chunk_stride, n_chunks, ch, w, g0, lanes);
  for (; ch < ch1; ++ch) value_gemm<1, NG>(vt, chunk_stride, n_chunks, ch, w, g0, lanes);
}

void value_gemm_all(const float* vt, size_t chunk_stride, int64_t n_chunks, int64_t n, const float* w, int n_out,
                    float* const* lanes) {
  for (int64_t ch0 = 0; ch0 < n; ch0 += 16) {
    const int64_t ch1 = std::min(n, ch0 + 16);
    int g = 0;
    for (; g + kValueOuts <= n_out; g += kValueOuts)
      value_gemm_channels<kValueOuts>(vt, chunk_stride, n_chunks, ch0, ch1, w, g, lanes);
    switch (n_out - g) {
      case 3: value_gemm_channels<3>(vt, chunk_stride, n_chunks, ch0, ch1, w, g, lanes); break;
      case 2: value_gemm_channels<2>(vt, chunk_stride, n_chunks, ch0, ch1, w, g, lanes); break;
      case 1: value_gemm_channels<1>(vt, chunk_stride, n_chunks, ch0, ch1, w, g, lanes); break;
      default: break;
    }
  }
}

}  // namespace

void dot_f16_rows_tinyblas(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                           int n_q, float* const* out) {
  if (n > kMaxScoreLen || n % 16 != 0) {
    avx2::dot_f16_rows_tinyblas(rows, row_stride, n_rows, n, q, n_q, out);
    return;
  }
  alignas(64) float qf[kScoreQ][kMaxScoreLen];
  for (int h0 = 0; h0 < n_q; h0 += kScoreQ) {
    const int nq = std::min(kScoreQ, n_q - h0);
    const float* qp[kScoreQ];
    for (int h = 0; h < nq; ++h) {
      for (int64_t i = 0; i < n; i += 16)
        _mm512_store_ps(qf[h] + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[h0 + h] + i))));
      qp[h] = qf[h];
    }
    switch (nq) {
      case 4: score_rows<4>(rows, row_stride, n_rows, n, qp, out + h0); break;
      case 3: score_rows<3>(rows, row_stride, n_rows, n, qp, out + h0); break;
      case 2: score_rows<2>(rows, row_stride, n_rows, n, qp, out + h0); break;
      default: score_rows<1>(rows, row_stride, n_rows, n, qp, out + h0); break;
    }
  }
}

// The shared group loop (attention_tinyblas_values_impl.h) with this level's transposition (16x16
// in registers, the channel tail masked) and GEMM.
namespace {

#define TB_OWN_TRANSPOSE
void transpose_chunk(const uint16_t* const* src, int64_t n, float* vt, int64_t vt_stride) {
  for (int64_t ch = 0; ch < n; ch += 16) {
    const __mmask16 mask = n - ch >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - ch)) - 1);
    __m512 r[16];
    for (int l = 0; l < 16; ++l)
      r[l] = src[l] ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src[l] + ch)) : _mm512_setzero_ps();
    transpose16(r);
    for (int l = 0; l < 16; ++l) _mm512_storeu_ps(vt + (ch + l) * vt_stride, r[l]);
  }
}

#define TB_OWN_LANES_GEMM
void lanes_gemm(const float* vt, const float* w_vec, int64_t kChunks, int64_t n_chunks, int64_t n, int n_out,
                float* const* lanes) {
  value_gemm_all(vt, size_t(kChunks), n_chunks, n, w_vec, n_out, lanes);
}

}  // namespace

#include "kernels/cpu/attention_tinyblas_values_impl.h"

}  // namespace sluice::kernels::cpu::avx512
