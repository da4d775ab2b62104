// AVX2 add_scaled_f16 in add_scaled_f16_tiled.h's blocking: for each 16 output values up to four
// outputs stay in registers across a tile of rows; each 16 F16 values are widened once (F16C) for
// all outputs, and nothing is stored until the tile is done. Each product and sum is rounded
// separately: the empty asm keeps the compiler from fusing them into an FMA (it may under -mfma),
// which would change the bits.
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/add_scaled_f16_tiled.h"
#include "kernels/cpu/avx2_common.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

constexpr int kMaxOut = 4;

inline __m256 load_f16x8(const std::byte* row, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * size_t(i))));
}

inline __m256 unfused_add(__m256 acc, __m256 w, __m256 v) {
  __m256 p = _mm256_mul_ps(w, v);
  asm("" : "+x"(p));
  return _mm256_add_ps(acc, p);
}

// NO outputs over values [i, i + 16) and rows [j0, j1) (AddScaledF16Tiled's Tile).
struct Tile {
  template <int NO>
  static void run(const std::byte* rows, size_t stride, int64_t j0, int64_t j1, int64_t i, const float* const* weight,
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
};

}  // namespace

void add_scaled_f16(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                    const float* const* weight, float* const* out, int n_out) {
  AddScaledF16Tiled<kMaxOut, Tile>::run(rows, row_stride, n_rows, n, weight, out, n_out);
}

}  // namespace sluice::kernels::cpu::avx2
