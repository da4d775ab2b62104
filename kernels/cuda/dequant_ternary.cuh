// Dequantizers of the ternary types (TQ1_0, TQ2_0): ggml's layouts as in kernels/cpu/blocks_iq.h
// and the float expressions of kernels/cpu/dequantize_iquants.cpp (float(digit - 1) * d).
// run(block, j, out) yields values 8j .. 8j+7 (j < 32). Contract: dequant_common.cuh.
//
// Where value k lives:
//   TQ2_0  2-bit digit l = (k % 128) / 32 of qs[32 (k / 128) + k % 32]; f16 d at 64
//   TQ1_0  base-3 digits, digit n of byte q being the top 2 bits of uint8(q * 3^n) * 3:
//            k < 160        digit k / 32 of qs[k % 32]
//            160 <= k < 240 digit (k - 160) / 16 of qs[32 + k % 16]
//            k >= 240       digit (k - 240) / 4 of qh[k % 4] (qh = bytes 48..51); f16 d at 52
//          so runs j < 30 read 8 consecutive bytes with one digit position, and runs 30, 31
//          read qh's 4 bytes at two digit positions.
#pragma once

#include "kernels/cuda/dequant_common.cuh"

namespace sluice::kernels::cuda::dq {

// Digit n (< 5) of a TQ1_0 byte: 3^n mod 256 from the bytes of 0x511B090301 (81 27 9 3 1), then
// ggml's fixed-point read of the top base-3 digit.
SLUICE_HD uint32_t tq1_digit(uint32_t q, int n) {
  const uint32_t pow3 = uint32_t(0x511B090301ull >> (8 * n)) & 0xFF;
  return (((q * pow3) & 0xFF) * 3) >> 8;
}

struct TQ1_0 {  // {u8 qs[48]; u8 qh[4]; f16 d}
  static constexpr int kQK = 256, kBytes = 54, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = fp16_to_f32(load_u16(b + 52));
    if (j < 30) {
      const bool head = j < 20;  // the 32-byte part of qs, else its 16-byte tail
      const int n = head ? j >> 2 : (j - 20) >> 1;
      const Bytes8 q = load8_a2(b + (head ? 8 * (j & 3) : 32 + 8 * ((j - 20) & 1)));
      for (int r = 0; r < 8; ++r) out[r] = biased_uint_to_float(tq1_digit(q[r], n), 1) * d;
    } else {
      const int n0 = 2 * (j - 30);
      for (int r = 0; r < 8; ++r) out[r] = biased_uint_to_float(tq1_digit(b[48 + (r & 3)], n0 + (r >> 2)), 1) * d;
    }
  }
};

struct TQ2_0 {  // {u8 qs[64]; f16 d}
  static constexpr int kQK = 256, kBytes = 66, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int k0 = 8 * j;
    const int shift = 2 * ((k0 & 127) >> 5);
    const Bytes8 q = load8_a2(b + 32 * (k0 >> 7) + (k0 & 31));
    const float d = fp16_to_f32(load_u16(b + 64));
    for (int r = 0; r < 8; ++r) out[r] = biased_uint_to_float((q[r] >> shift) & 3, 1) * d;
  }
};

}  // namespace sluice::kernels::cuda::dq
