// AVX-512 add_scaled_f16 in add_scaled_f16_tiled.h's blocking, with one 16-lane register per
// output (AVX2 needs two 8-lane ones), so up to eight outputs share each widened row of 16 F16
// values. Each product and sum is rounded separately (the empty asm keeps the compiler from fusing
// them), so the bits equal AVX2's and the scalar reference's.
#include "kernels/cpu/avx512_common.h"

#include "kernels/cpu/add_scaled_f16_tiled.h"
#include "kernels/cpu/avx512.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

constexpr int kMaxOut = 8;

inline __m512 unfused_add(__m512 acc, __m512 w, __m512 v) {
  __m512 p = _mm512_mul_ps(w, v);
  asm("" : "+v"(p));
  return _mm512_add_ps(acc, p);
}

// NO outputs over values [i, i + 16) and rows [j0, j1) (AddScaledF16Tiled's Tile).
struct Tile {
  template <int NO>
  static void run(const std::byte* rows, size_t stride, int64_t j0, int64_t j1, int64_t i, const float* const* weight,
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
};

}  // namespace

void add_scaled_f16(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                    const float* const* weight, float* const* out, int n_out) {
  AddScaledF16Tiled<kMaxOut, Tile>::run(rows, row_stride, n_rows, n, weight, out, n_out);
}

}  // namespace sluice::kernels::cpu::avx512
