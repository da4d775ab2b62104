// The blocking both SIMD add_scaled_f16 kernels share: rows 64 at a time (they stay in L1/L2), for
// each 16 output values up to kMaxOut outputs held in registers across those rows by the ISA's
// Tile::run<NO> (add_scaled_f16_avx2.cpp, add_scaled_f16_avx512.cpp), the n % 16 tail value by
// value here. Every output value gets the products of rows j = 0, 1, ... added in that order, each
// product and sum rounded separately (the empty asm keeps the compiler from fusing them into an
// FMA), so every level's bits equal the scalar reference's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/avx2_common.h"  // half_to_f32 (F16C: every SIMD level sluice builds has it)

namespace sluice::kernels::cpu {

// Tile::run<NO>(rows, stride, j0, j1, i, weight, out): NO outputs over values [i, i + 16) and rows
// [j0, j1), in the order above.
template <int kMaxOut, class Tile>
class AddScaledF16Tiled {
 public:
  static void run(const std::byte* rows, size_t stride, int64_t n_rows, int64_t n, const float* const* weight,
                  float* const* out, int n_out) {
    for (int g0 = 0; g0 < n_out; g0 += kMaxOut)
      dispatch(std::min(kMaxOut, n_out - g0), rows, stride, n_rows, n, weight + g0, out + g0,
               std::make_integer_sequence<int, kMaxOut>{});
  }

 private:
  static constexpr int64_t kRowTile = 64;

  template <int NO>
  static void add_rows(const std::byte* rows, size_t stride, int64_t n_rows, int64_t n, const float* const* weight,
                       float* const* out) {
    for (int64_t j0 = 0; j0 < n_rows; j0 += kRowTile) {
      const int64_t j1 = std::min(n_rows, j0 + kRowTile);
      int64_t i = 0;
      for (; i + 16 <= n; i += 16) Tile::template run<NO>(rows, stride, j0, j1, i, weight, out);
      for (int64_t j = j0; j < j1; ++j) {  // the n % 16 tail, value by value
        const auto* v = reinterpret_cast<const uint16_t*>(rows + size_t(j) * stride);
        for (int64_t k = i; k < n; ++k) {
          const float value = avx2::half_to_f32(v[k]);
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
  static void dispatch(int count, const std::byte* rows, size_t stride, int64_t n_rows, int64_t n, const float* const* w,
                       float* const* o, std::integer_sequence<int, NO...>) {
    ((count == NO + 1 ? add_rows<NO + 1>(rows, stride, n_rows, n, w, o) : void()), ...);
  }
};

}  // namespace sluice::kernels::cpu
