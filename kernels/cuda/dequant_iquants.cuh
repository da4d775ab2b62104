// Dequantizers of the i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS):
// ggml's 256-value super-blocks as in kernels/cpu/blocks_iq.h, with the float expressions of
// kernels/cpu/dequantize_iquants.cpp. Codebooks: iq_tables.cuh. Contract: dequant_common.cuh.
//
// run(block, j, out) yields values 8j .. 8j+7 (j < 32): group ib = j / 4 of 32 values, and
// l = j % 4 inside it. For the IQ2 and IQ1 types that is exactly one codebook entry (8 values),
// for IQ3 two entries of 4, so every run needs one grid index (or two) and one scale.
//
// Byte offsets of run j's fields (d is the f16 at offset 0 except for IQ1_M):
//   IQ2_XXS  grid index byte 2 + 8 ib + l; u32 at 6 + 8 ib: 7-bit sign groups (7 l), scale (>> 28)
//   IQ2_XS   u16 at 2 + 2 j: 9-bit grid index, 7 sign bits (>> 9); scale nibble l/2 of byte 66 + ib
//   IQ2_S    index low byte 2 + j, high 2 bits (2 l) of qh byte 66 + ib; 8 sign bits at 34 + j;
//            scale nibble l/2 of byte 74 + ib
//   IQ3_XXS  grid index bytes 2 + 2 j, 3 + 2 j; u32 at 66 + 4 ib: sign groups and scale as IQ2_XXS
//   IQ3_S    index bytes 2 + 2 j, 3 + 2 j, their ninth bits 2 l, 2 l + 1 of qh byte 66 + ib;
//            8 sign bits at 74 + j; scale nibble ib % 2 of byte 106 + ib / 2
//   IQ1_S    index low byte 2 + j; u16 at 34 + 2 ib: index high 3 bits (3 l), scale (12..14),
//            delta sign (15)
//   IQ1_M    index low byte j; qh byte 32 + j / 2 (nibble l % 2: 3 index bits, delta sign);
//            3-bit scales in the u16s at 48.., whose top nibbles together are the f16 d
//   IQ4_XS   16-value nibble runs as IQ4_NL: bytes 8 + 16 ib + 8 (l % 2), high nibble for l >= 2;
//            6-bit scale: nibble of byte 4 + ib / 2, 2 bits (2 ib) of the u16 at 2
//
// Signs: CPU code multiplies by +-1.0f after the scale; here the sign goes on the exact grid
// value before it. IEEE rounding is symmetric, so db * (-g) and (db * g) * -1 are the same bits.
#pragma once

#include "kernels/cuda/dequant_common.cuh"
#include "kernels/cuda/iq_tables.cuh"

namespace sluice::kernels::cuda::dq {

// Byte r of a packed codebook entry.
SLUICE_HD uint32_t grid_byte(uint64_t entry, int r) { return uint32_t(entry >> (8 * r)) & 0xFF; }

// +-g for a grid magnitude g (< 2^23) and sign mask bit r.
SLUICE_HD float signed_magnitude(uint32_t g, uint32_t signs, int r) {
  const float v = small_uint_to_float(g);
  return (signs >> r) & 1 ? -v : v;
}

// ggml's IQ2 scale d * (0.5 + s) * 0.25 (IQ3_XXS: * 0.5) for a 4-bit s.
SLUICE_HD float iq2_scale(float d, uint32_t s) { return d * (0.5f + small_uint_to_float(s)) * 0.25f; }

// Eight IQ1 values dl * (grid + delta); grid bytes are int8 in {-1, 0, 1}.
SLUICE_HD void iq1_values(uint64_t g, float dl, float delta, float* out) {
  for (int r = 0; r < 8; ++r) out[r] = dl * (biased_uint_to_float(grid_byte(g, r) ^ 0x80, 128) + delta);
}

struct IQ2_XXS {  // {f16 d; u16 qs[32]}
  static constexpr int kQK = 256, kBytes = 66, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const uint32_t aux1 = load_u32_a2(b + 6 + 8 * ib);
    const float db = iq2_scale(fp16_to_f32(load_u16(b)), aux1 >> 28);
    const uint64_t g = iq2xxs_grid(b[2 + 8 * ib + l]);
    const uint32_t signs = iq_signs((aux1 >> (7 * l)) & 127);
    for (int r = 0; r < 8; ++r) out[r] = db * signed_magnitude(grid_byte(g, r), signs, r);
  }
};

struct IQ2_XS {  // {f16 d; u16 qs[32]; u8 scales[8]}
  static constexpr int kQK = 256, kBytes = 74, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const uint32_t q = load_u16(b + 2 + 2 * j);
    const float db = iq2_scale(fp16_to_f32(load_u16(b)), (uint32_t(b[66 + ib]) >> (4 * (l >> 1))) & 0xF);
    const uint64_t g = iq2xs_grid(q & 511);
    const uint32_t signs = iq_signs(q >> 9);
    for (int r = 0; r < 8; ++r) out[r] = db * signed_magnitude(grid_byte(g, r), signs, r);
  }
};

struct IQ2_S {  // {f16 d; u8 qs[32]; u8 signs[32]; u8 qh[8]; u8 scales[8]}
  static constexpr int kQK = 256, kBytes = 82, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const float db = iq2_scale(fp16_to_f32(load_u16(b)), (uint32_t(b[74 + ib]) >> (4 * (l >> 1))) & 0xF);
    const uint32_t idx = b[2 + j] | ((uint32_t(b[66 + ib]) << (8 - 2 * l)) & 0x300);
    const uint64_t g = iq2s_grid(idx);
    const uint32_t signs = b[34 + j];
    for (int r = 0; r < 8; ++r) out[r] = db * signed_magnitude(grid_byte(g, r), signs, r);
  }
};

struct IQ3_XXS {  // {f16 d; u8 qs[64] grid indices; u32 sign groups and scales[8]}
  static constexpr int kQK = 256, kBytes = 98, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const uint32_t aux = load_u32_a2(b + 66 + 4 * ib);
    const float db = fp16_to_f32(load_u16(b)) * (0.5f + small_uint_to_float(aux >> 28)) * 0.5f;
    const uint32_t signs = iq_signs((aux >> (7 * l)) & 127);
    const uint32_t g1 = iq3xxs_grid(b[2 + 2 * j]), g2 = iq3xxs_grid(b[3 + 2 * j]);
    for (int r = 0; r < 4; ++r) {
      out[r] = db * signed_magnitude(grid_byte(g1, r), signs, r);
      out[r + 4] = db * signed_magnitude(grid_byte(g2, r), signs, r + 4);
    }
  }
};

struct IQ3_S {  // {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]}
  static constexpr int kQK = 256, kBytes = 110, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const uint32_t nibble = (uint32_t(b[106 + (ib >> 1)]) >> (4 * (ib & 1))) & 0xF;
    const float db = fp16_to_f32(load_u16(b)) * small_uint_to_float(1 + 2 * nibble);
    const uint32_t qh = b[66 + ib];
    const uint32_t g1 = iq3s_grid(b[2 + 2 * j] | ((qh << (8 - 2 * l)) & 256));
    const uint32_t g2 = iq3s_grid(b[3 + 2 * j] | ((qh << (7 - 2 * l)) & 256));
    const uint32_t signs = b[74 + j];
    for (int r = 0; r < 4; ++r) {
      out[r] = db * signed_magnitude(grid_byte(g1, r), signs, r);
      out[r + 4] = db * signed_magnitude(grid_byte(g2, r), signs, r + 4);
    }
  }
};

struct IQ1_S {  // {f16 d; u8 qs[32]; u16 qh[8]}
  static constexpr int kQK = 256, kBytes = 50, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const uint32_t qh = load_u16(b + 34 + 2 * ib);
    const float dl = fp16_to_f32(load_u16(b)) * small_uint_to_float(2 * ((qh >> 12) & 7) + 1);
    const float delta = qh & 0x8000 ? -cpu_tables::kIq1Delta : cpu_tables::kIq1Delta;
    iq1_values(iq1s_grid(b[2 + j] | (((qh >> (3 * l)) & 7) << 8)), dl, delta, out);
  }
};

struct IQ1_M {  // {u8 qs[32]; u8 qh[16]; u8 scales[8]} (d: the top nibbles of the 4 scale words)
  static constexpr int kQK = 256, kBytes = 56, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const uint32_t sc0 = load_u16(b + 48), sc1 = load_u16(b + 50), sc2 = load_u16(b + 52), sc3 = load_u16(b + 54);
    const uint32_t d_bits = (sc0 >> 12) | ((sc1 >> 8) & 0x00F0) | ((sc2 >> 4) & 0x0F00) | (sc3 & 0xF000);
    const uint32_t w = load_u16(b + 48 + 2 * (ib >> 1));  // one of sc0..sc3, without a local array
    const uint32_t s3 = (w >> (6 * (ib & 1) + 3 * (l >> 1))) & 7;
    const float dl = fp16_to_f32(uint16_t(d_bits)) * small_uint_to_float(2 * s3 + 1);
    const uint32_t h = b[32 + (j >> 1)];
    const uint32_t idx = b[j] | (((l & 1) == 0 ? (h << 8) : (h << 4)) & 0x700);
    const float delta = h & ((l & 1) == 0 ? 0x08 : 0x80) ? -cpu_tables::kIq1Delta : cpu_tables::kIq1Delta;
    iq1_values(iq1s_grid(idx), dl, delta, out);
  }
};

struct IQ4_XS {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
  static constexpr int kQK = 256, kBytes = 136, kRun = 8, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int j, float* out) {
    const int ib = j >> 2, l = j & 3;
    const uint32_t lo = (uint32_t(b[4 + (ib >> 1)]) >> (4 * (ib & 1))) & 0xF;
    const uint32_t hi = (uint32_t(load_u16(b + 2)) >> (2 * ib)) & 3;
    const float dl = fp16_to_f32(load_u16(b)) * biased_uint_to_float(lo | (hi << 4), 32);
    const Bytes8 q = load8_a2(b + 8 + 16 * ib + 8 * (l & 1));
    const int shift = l >= 2 ? 4 : 0;
    for (int r = 0; r < 8; ++r) out[r] = dl * float(iq4_nl_value((q[r] >> shift) & 0xF));
  }
};

}  // namespace sluice::kernels::cuda::dq
