// Dequantizers of the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, IQ4_NL), ggml's
// layouts as in kernels/cpu/blocks.h and the float expressions of kernels/cpu/dequantize_legacy.cpp.
// run(block, j, out) yields values 8j .. 8j+7 (j < 4). Contract: dequant_common.cuh.
//
// Index map of the 4-bit types: value k < 16 is the low nibble of qs[k], value k >= 16 the high
// nibble of qs[k - 16]. Q5's fifth bit of value k is bit k of the 32-bit qh.
#pragma once

#include "kernels/cuda/dequant_common.cuh"

namespace sluice::kernels::cuda::dq {

// The 8 bytes holding values 8j .. 8j+7 of a 16-byte qs array (bytes 8 (j % 2) ..), and the
// nibble of value 8j + r in them: low for j < 2, high for j >= 2.
SLUICE_HD Bytes8 legacy_bytes(const uint8_t* qs, int j) { return load8_a2(qs + (j & 1) * 8); }
SLUICE_HD uint32_t legacy_nibble(const Bytes8& q, int j, int r) { return j >= 2 ? q[r] >> 4 : q[r] & 0x0F; }

struct Q4_0 {  // {f16 d; u8 qs[16]}
  static constexpr int kQK = 32, kBytes = 18, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = fp16_to_f32(load_u16(b));
    const Bytes8 q = legacy_bytes(b + 2, j);
    for (int r = 0; r < 8; ++r) out[r] = biased_uint_to_float(legacy_nibble(q, j, r), 8) * d;
  }
};

struct Q4_1 {  // {f16 d; f16 m; u8 qs[16]}
  static constexpr int kQK = 32, kBytes = 20, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = fp16_to_f32(load_u16(b));
    const float m = fp16_to_f32(load_u16(b + 2));
    const Bytes8 q = legacy_bytes(b + 4, j);
    for (int r = 0; r < 8; ++r) out[r] = small_uint_to_float(legacy_nibble(q, j, r)) * d + m;
  }
};

struct Q5_0 {  // {f16 d; u8 qh[4]; u8 qs[16]}
  static constexpr int kQK = 32, kBytes = 22, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = fp16_to_f32(load_u16(b));
    const uint32_t qh = load_u32_a2(b + 2) >> (8 * j);  // bits of values 8j..8j+7 at the bottom
    const Bytes8 qs = legacy_bytes(b + 6, j);
    for (int r = 0; r < 8; ++r) {
      const uint32_t q = legacy_nibble(qs, j, r) | (((qh >> r) & 1) << 4);
      out[r] = biased_uint_to_float(q, 16) * d;
    }
  }
};

struct Q5_1 {  // {f16 d; f16 m; u8 qh[4]; u8 qs[16]}
  static constexpr int kQK = 32, kBytes = 24, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = fp16_to_f32(load_u16(b));
    const float m = fp16_to_f32(load_u16(b + 2));
    const uint32_t qh = load_u32_a2(b + 4) >> (8 * j);
    const Bytes8 qs = legacy_bytes(b + 8, j);
    for (int r = 0; r < 8; ++r) {
      const uint32_t q = legacy_nibble(qs, j, r) | (((qh >> r) & 1) << 4);
      out[r] = small_uint_to_float(q) * d + m;
    }
  }
};

struct Q8_0 {  // {f16 d; i8 qs[32]}
  static constexpr int kQK = 32, kBytes = 34, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = fp16_to_f32(load_u16(b));
    const Bytes8 qs = load8_a2(b + 2 + 8 * j);
    // int8 q as (q + 128) - 128: exact, without an int->float conversion
    for (int r = 0; r < 8; ++r) out[r] = biased_uint_to_float(qs[r] ^ 0x80, 128) * d;
  }
};

struct MXFP4 {  // {u8 e (E8M0); u8 qs[16]}; 17-byte blocks: byte aligned
  static constexpr int kQK = 32, kBytes = 17, kRun = 8, kAlign = 1;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = e8m0_to_f32_half(b[0]);
    const uint8_t* qs = b + 1 + (j & 1) * 8;  // odd offset: byte loads
    for (int r = 0; r < 8; ++r) {
      const uint32_t c = j >= 2 ? uint32_t(qs[r]) >> 4 : qs[r] & 0x0Fu;
      out[r] = float(mxfp4_value(c)) * d;
    }
  }
};

struct IQ4_NL {  // {f16 d; u8 qs[16]} with non-linear code points
  static constexpr int kQK = 32, kBytes = 18, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const float d = fp16_to_f32(load_u16(b));
    const Bytes8 q = legacy_bytes(b + 2, j);
    for (int r = 0; r < 8; ++r) out[r] = d * float(iq4_nl_value(legacy_nibble(q, j, r)));
  }
};

}  // namespace sluice::kernels::cuda::dq
