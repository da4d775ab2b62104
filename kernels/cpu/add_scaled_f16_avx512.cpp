// AVX-512 add_scaled_f16: add_scaled_f16_avx2.cpp's tiling with one 16-lane register per output
// (AVX2 needs two 8-lane ones), so up to eight outputs share each widened row of 16 F16 values.
// Each output value still gets the products of rows j = 0, 1, ... added in that order, each
// product and sum rounded separately (the empty asm keeps the compiler from fusing them), so the
// bits equal AVX2's and the scalar reference's.
#include "kernels/cpu/avx512_common.h"

#include <algorithm>
#include <utility>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

constexpr int64_t kRowTile = 64;
constexpr int kMaxOut = 8;

inline __m512 unfused_add(__m512 acc, __m512 w, __m512 v) {
  __m512 p = _mm512_mul_ps(w, v);
  asm("" : "+v"(p));
  return _mm512_add_ps(acc, p);
}

// Up to kMaxOut outputs (NO of them) over values [i, i + 16) and rows [j0, j1).
template <int NO>
void tile16(const std::byte* rows, size_t stride, int64_t j0, int64_t j1, int64_t i, const float* const* weight,
            float* const* out) {
  __m512 acc[NO];
  for (int g = 0; g < NO; ++g) acc[g] = _mm512_loadu_ps(out[g] + i);
  for (int64_t j = j0; j < j1; ++j) {
    const auto* row = reinterpret_cast<const __m256i*>(rows + size_t(j) * stride + 2 * size_t(i));
    const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(row));
    for (int g = 0; g < NO; ++g) acc[g] = unfused_add(acc[g], _mm512_set1_ps(weight[g][j]), v);
  }
  for (int g = 0; g < NO; ++g) _mm512_storeu_ps(out[g] + i, acc[g]);
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

template <int... NO>
void add_rows_n(int count, const std::byte* rows, size_t stride, int64_t n_rows, int64_t n, const float* const* w,
                float* const* o, std::integer_sequence<int, NO...>) {
  ((count == NO + 1 ? add_rows<NO + 1>(rows, stride, n_rows, n, w, o) : void()), ...);
}

}  // namespace

void add_scaled_f16(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                    const float* const* weight, float* const* out, int n_out) {
  for (int g0 = 0; g0 < n_out; g0 += kMaxOut)
    add_rows_n(std::min(kMaxOut, n_out - g0), rows, row_stride, n_rows, n, weight + g0, out + g0,
               std::make_integer_sequence<int, kMaxOut>{});
}

}  // namespace sluice::kernels::cpu::avx512
