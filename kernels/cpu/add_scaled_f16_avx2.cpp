// AVX2 add_scaled_f16. The rows are taken 64 at a time (they stay in L1/L2), and for each 16
// output values the up to four outputs stay in registers across those rows: each 16 F16 values
// are widened once (F16C) for all outputs, and nothing is stored until the tile is done. Every
// output value still gets the products of rows j = 0, 1, ... added in that order, each product
// and sum rounded separately: the empty asm keeps the compiler from fusing them into an FMA (it
// may under -mfma), which would change the bits.
#include <algorithm>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

constexpr int64_t kRowTile = 64;
constexpr int kMaxOut = 4;

inline __m256 load_f16x8(const std::byte* row, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * size_t(i))));
}

inline __m256 unfused_add(__m256 acc, __m256 w, __m256 v) {
  __m256 p = _mm256_mul_ps(w, v);
  asm("" : "+x"(p));
  return _mm256_add_ps(acc, p);
}

// Up to kMaxOut outputs (NO of them) over values [i, i + 16) and rows [j0, j1).
template <int NO>
void tile16(const std::byte* rows, size_t stride, int64_t j0, int64_t j1, int64_t i, const float* const* weight,
            float* const* out) {
  __m256 lo[NO], hi[NO];
  for (int g = 0; g < NO; ++g) {
    lo[g] = _mm256_loadu_ps(out[g] + i);
    hi[g] = _mm256_loadu_ps(out[g] + i + 8);
  }
  for (int64_t j = j0; j < j1; ++j) {
    const std::byte* row = rows + size_t(j) * stride;
    const __m256 v_lo = load_f16x8(row, i), v_hi = load_f16x8(row, i + 8);
    for (int g = 0; g < NO; ++g) {
      const __m256 w = _mm256_broadcast_ss(weight[g] + j);
      lo[g] = unfused_add(lo[g], w, v_lo);
      hi[g] = unfused_add(hi[g], w, v_hi);
    }
  }
  for (int g = 0; g < NO; ++g) {
    _mm256_storeu_ps(out[g] + i, lo[g]);
    _mm256_storeu_ps(out[g] + i + 8, hi[g]);
  }
}

template <int NO>
void add_rows(const std::byte* rows, size_t stride, int64_t n_rows, int64_t n, const float* const* weight,
              float* const* out) {
  for (int64_t j0 = 0; j0 < n_rows; j0 += kRowTile) {
    const int64_t j1 = std::min(n_rows, j0 + kRowTile);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) tile16<NO>(rows, stride, j0, j1, i, weight, out);
    for (int64_t j = j0; j < j1; ++j) {  // the n % 16 tail, value by value
      const auto* v = reinterpret_cast<const uint16_t*>(rows + size_t(j) * stride);
      for (int64_t k = i; k < n; ++k) {
        const float value = half_to_f32(v[k]);
        for (int g = 0; g < NO; ++g) {
          float p = weight[g][j] * value;
          asm("" : "+x"(p));
          out[g][k] += p;
        }
      }
    }
  }
}

}  // namespace

void add_scaled_f16(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                    const float* const* weight, float* const* out, int n_out) {
  for (int g0 = 0; g0 < n_out; g0 += kMaxOut) {
    const float* const* w = weight + g0;
    float* const* o = out + g0;
    switch (std::min(kMaxOut, n_out - g0)) {
      case 1: add_rows<1>(rows, row_stride, n_rows, n, w, o); break;
      case 2: add_rows<2>(rows, row_stride, n_rows, n, w, o); break;
      case 3: add_rows<3>(rows, row_stride, n_rows, n, w, o); break;
      default: add_rows<4>(rows, row_stride, n_rows, n, w, o); break;
    }
  }
}

}  // namespace sluice::kernels::cpu::avx2
