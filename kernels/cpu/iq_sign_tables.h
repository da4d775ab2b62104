// Sign tables shared by the IQ2 and IQ3 families (ggml-common.h: ksigns_iq2xs, kmask_iq2xs).
//
// These formats store 7 sign bits per group of 8 values; the eighth sign is implied by even
// parity (an even number of negatives). kSignsIq2xs[s] is the full 8-bit mask for the 7 stored
// bits s (bit j set: value j negative). kSignBytes[s] spreads it to 8 bytes of +1 / -1 for
// _mm256_sign_epi8 (ggml's keven_signs_q2xs), derived here from the same table.
// Format data defined by ggml; do not edit by hand.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace sluice::kernels::cpu {

inline constexpr uint8_t kMaskIq2xs[8] = {1, 2, 4, 8, 16, 32, 64, 128};

inline constexpr uint8_t kSignsIq2xs[128] = {
    0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15,
    144, 17, 18, 147, 20, 149, 150, 23, 24, 153, 154, 27, 156, 29, 30, 159,
    160, 33, 34, 163, 36, 165, 166, 39, 40, 169, 170, 43, 172, 45, 46, 175,
    48, 177, 178, 51, 180, 53, 54, 183, 184, 57, 58, 187, 60, 189, 190, 63,
    192, 65, 66, 195, 68, 197, 198, 71, 72, 201, 202, 75, 204, 77, 78, 207,
    80, 209, 210, 83, 212, 85, 86, 215, 216, 89, 90, 219, 92, 221, 222, 95,
    96, 225, 226, 99, 228, 101, 102, 231, 232, 105, 106, 235, 108, 237, 238, 111,
    240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255,
};

inline constexpr std::array<uint64_t, 128> kSignBytes = [] {
  std::array<uint64_t, 128> t{};
  for (int s = 0; s < 128; ++s)
    for (int j = 0; j < 8; ++j) t[size_t(s)] |= uint64_t((kSignsIq2xs[s] >> j) & 1 ? 0xff : 0x01) << (8 * j);
  return t;
}();

}  // namespace sluice::kernels::cpu
