// The avx512 level's tinyBLAS-order attention products (dispatch.h), register-tiled: equal to
// attention_tinyblas_impl.h's bodies bit for bit. Every product and sum is the same fma in the same
// lane and order; only which outputs share a load changed.
//   scores: 4 query rows x 4 key rows of 16-lane accumulators (16 of the 32 registers), each key
//           row widened once per 16-value step for the 4 query rows;
//   values: lanes are cells mod 16, so with the channels in the vector a 16-channel block of one
//           output needs 16 accumulators; half the lanes (8) for 3 outputs take 24 registers, and
//           each widened value row serves the 3.
#include "kernels/cpu/avx512_common.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"
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

constexpr int kValueOuts = 3, kHalfLanes = 8;

// One 16-channel block (mask: its channels) and one half of the lanes, for NG outputs.
template <int NG>
void value_block(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n, int64_t ch,
                 __mmask16 mask, int half, const float* const* weight, float* const* lanes) {
  __m512 acc[NG][kHalfLanes];
  for (int g = 0; g < NG; ++g)
    for (int l = 0; l < kHalfLanes; ++l)
      acc[g][l] = _mm512_maskz_loadu_ps(mask, lanes[g] + size_t(half * kHalfLanes + l) * size_t(n) + size_t(ch));
  const int64_t end = first_cell + n_rows;
  auto cell = [&]<int L>(int64_t base) {
    const int64_t c = base + half * kHalfLanes + L;
    if (c < first_cell || c >= end) return;
    const int64_t j = c - first_cell;
    const __m512 v = _mm512_cvtph_ps(
        _mm256_maskz_loadu_epi16(mask, rows + size_t(j) * row_stride + size_t(ch) * 2));
    for (int g = 0; g < NG; ++g) acc[g][L] = _mm512_fmadd_ps(v, _mm512_set1_ps(weight[g][j]), acc[g][L]);
  };
  for (int64_t base = first_cell - first_cell % 16; base < end; base += 16)
    [&]<int... L>(std::integer_sequence<int, L...>) { (cell.template operator()<L>(base), ...); }(
        std::make_integer_sequence<int, kHalfLanes>{});
  for (int g = 0; g < NG; ++g)
    for (int l = 0; l < kHalfLanes; ++l)
      _mm512_mask_storeu_ps(lanes[g] + size_t(half * kHalfLanes + l) * size_t(n) + size_t(ch), mask, acc[g][l]);
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

void fma_f16_lanes(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n,
                   const float* const* weight, float* const* lanes, int n_out) {
  for (int64_t ch = 0; ch < n; ch += 16) {
    const __mmask16 mask = n - ch >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - ch)) - 1);
    for (int half = 0; half < 2; ++half) {
      int g = 0;
      for (; g + kValueOuts <= n_out; g += kValueOuts)
        value_block<kValueOuts>(rows, row_stride, first_cell, n_rows, n, ch, mask, half, weight + g, lanes + g);
      if (n_out - g == 2)
        value_block<2>(rows, row_stride, first_cell, n_rows, n, ch, mask, half, weight + g, lanes + g);
      else if (n_out - g == 1)
        value_block<1>(rows, row_stride, first_cell, n_rows, n, ch, mask, half, weight + g, lanes + g);
    }
  }
}

}  // namespace sluice::kernels::cpu::avx512
