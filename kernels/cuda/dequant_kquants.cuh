// Dequantizers of the 256-value k-quant super-blocks (Q2_K .. Q6_K), ggml's layouts as in
// kernels/cpu/blocks.h and the float expressions of kernels/cpu/dequantize_kquants.cpp.
// run(block, j, out) yields values k0 .. k0+7 with k0 = 8j (j < 32): each run lies inside one
// 16-value scale group, so it needs one scale. Contract: dequant_common.cuh.
//
// Where value k lives (half = k / 128, r = k % 128):
//   Q2_K  qs[32 half + 16 ((r/16) % 2) + k % 16] >> 2 (r/32), 2 bits; scales[k/16]: lo d, hi min
//   Q3_K  qs[32 half + r % 32] >> 2 (r/32), 2 bits; hmask[r % 32] bit (4 half + r/32) set = no
//         -4 offset; 6-bit scale k/16 packed in 12 bytes, biased by 32
//   Q4_K  qs[32 (k/64) + k % 32], low nibble when (k/32) even; 6-bit scale/min (k/32)
//   Q5_K  as Q4_K, plus bit (k/32) of qh[k % 32] worth 16
//   Q6_K  ql[64 half + r % 32 + 32 ((r/32) % 2)] nibble (r/64); qh[32 half + r % 32] bits
//         2 (r/32); value - 32; int8 scale [8 half + (r % 32)/16 + 2 (r/32)]
#pragma once

#include "kernels/cuda/dequant_common.cuh"

namespace sluice::kernels::cuda::dq {

// Q4_K / Q5_K packed 6-bit scale and min of sub-block `sub` (< 8); blocks.h's scale_min_k4.
SLUICE_HD void scale_min_k4(int sub, const uint8_t* q, uint32_t* d, uint32_t* m) {
  if (sub < 4) {
    *d = q[sub] & 63u;
    *m = q[sub + 4] & 63u;
  } else {
    *d = (q[sub + 4] & 0xFu) | ((uint32_t(q[sub - 4]) >> 6) << 4);
    *m = (uint32_t(q[sub + 4]) >> 4) | ((uint32_t(q[sub]) >> 6) << 4);
  }
}

// Q3_K scale i (< 16), unbiased: low 4 bits from byte i % 8 (nibble i / 8), high 2 bits from
// byte 8 + i % 4 (bits 2 (i / 4)); the per-byte form of blocks.h's unpack_q3_k_scales.
SLUICE_HD int q3_k_scale(const uint8_t* packed, int i) {
  const uint32_t lo = (uint32_t(packed[i & 7]) >> (4 * (i >> 3))) & 0xF;
  const uint32_t hi = (uint32_t(packed[8 + (i & 3)]) >> (2 * (i >> 2))) & 3;
  return int(lo | (hi << 4)) - 32;
}

struct Q2_K {  // {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}
  static constexpr int kQK = 256, kBytes = 84, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int k0 = 8 * j, half = k0 >> 7, r0 = k0 & 127;
    const int shift = 2 * (r0 >> 5);
    const Bytes8 q = load8_a2(b + 16 + 32 * half + 16 * ((r0 >> 4) & 1) + (r0 & 15));
    const uint32_t sc = b[k0 >> 4];
    const float d = fp16_to_f32(load_u16(b + 80));
    const float dmin = fp16_to_f32(load_u16(b + 82));
    const float dl = d * small_uint_to_float(sc & 0xF);
    const float ml = dmin * small_uint_to_float(sc >> 4);
    for (int r = 0; r < 8; ++r) out[r] = dl * small_uint_to_float((q[r] >> shift) & 3) - ml;
  }
};

struct Q3_K {  // {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
  static constexpr int kQK = 256, kBytes = 110, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int k0 = 8 * j, half = k0 >> 7, r0 = k0 & 127;
    const int shift = 2 * (r0 >> 5);
    const uint32_t m = 1u << (4 * half + (r0 >> 5));
    const Bytes8 hm = load8_a2(b + (r0 & 31));
    const Bytes8 q = load8_a2(b + 32 + 32 * half + (r0 & 31));
    const float d_all = fp16_to_f32(load_u16(b + 108));
    const float dl = d_all * float(q3_k_scale(b + 96, k0 >> 4));
    for (int r = 0; r < 8; ++r) {
      // ((q >> shift) & 3) - (bit set ? 0 : 4), as (value + 4) - 4 to stay unsigned
      const uint32_t v = ((q[r] >> shift) & 3) + ((hm[r] & m) ? 4u : 0u);
      out[r] = dl * biased_uint_to_float(v, 4);
    }
  }
};

struct Q4_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
  static constexpr int kQK = 256, kBytes = 144, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int k0 = 8 * j, sub = k0 >> 5;
    const Bytes8 q = load8_a2(b + 16 + 32 * (k0 >> 6) + (k0 & 31));
    uint32_t sc, mn;
    scale_min_k4(sub, b + 4, &sc, &mn);
    const float d1 = fp16_to_f32(load_u16(b)) * small_uint_to_float(sc);
    const float m1 = fp16_to_f32(load_u16(b + 2)) * small_uint_to_float(mn);
    const int shift = 4 * (sub & 1);
    for (int r = 0; r < 8; ++r) out[r] = d1 * small_uint_to_float((q[r] >> shift) & 0xF) - m1;
  }
};

struct Q5_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
  static constexpr int kQK = 256, kBytes = 176, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int k0 = 8 * j, sub = k0 >> 5;
    const Bytes8 qh = load8_a2(b + 16 + (k0 & 31));
    const Bytes8 ql = load8_a2(b + 48 + 32 * (k0 >> 6) + (k0 & 31));
    uint32_t sc, mn;
    scale_min_k4(sub, b + 4, &sc, &mn);
    const float d1 = fp16_to_f32(load_u16(b)) * small_uint_to_float(sc);
    const float m1 = fp16_to_f32(load_u16(b + 2)) * small_uint_to_float(mn);
    const int shift = 4 * (sub & 1);
    for (int r = 0; r < 8; ++r) {
      const uint32_t v = ((ql[r] >> shift) & 0xF) + (((qh[r] >> sub) & 1) << 4);
      out[r] = d1 * small_uint_to_float(v) - m1;
    }
  }
};

struct Q6_K {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
  static constexpr int kQK = 256, kBytes = 210, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int k0 = 8 * j, half = k0 >> 7, r0 = k0 & 127;
    const int quarter = r0 >> 5, l0 = r0 & 31;
    const Bytes8 ql = load8_a2(b + 64 * half + l0 + 32 * (quarter & 1));
    const Bytes8 qh = load8_a2(b + 128 + 32 * half + l0);
    const int8_t sc = int8_t(b[192 + 8 * half + (l0 >> 4) + 2 * quarter]);
    const float d = fp16_to_f32(load_u16(b + 208));
    const float ds = d * float(sc);
    const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
    for (int r = 0; r < 8; ++r) {
      const uint32_t v = ((ql[r] >> lshift) & 0xF) | (((qh[r] >> hshift) & 3) << 4);
      out[r] = ds * biased_uint_to_float(v, 32);
    }
  }
};

}  // namespace sluice::kernels::cuda::dq
