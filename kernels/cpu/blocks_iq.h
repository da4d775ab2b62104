// ggml's block layouts of the i-quants and the ternary types, as the CPU kernels see them.
//
// Byte for byte the layout ggml writes into GGUF files (ggml-common.h); the static_asserts pin
// the sizes to common/ggml_type.cpp's table. All are 256-value super-blocks (kQK_K). Grid
// indices select 8 (IQ2, IQ1) or 4 (IQ3) values from the codebooks in iq*_tables.h.
#pragma once

#include <cstdint>

#include "kernels/cpu/blocks.h"

namespace sluice::kernels::cpu {

// Ternary, 1.6875 bpw: qs packs 5 base-3 digits per byte (values 0..239 of the 256), qh 4 per
// byte (the last 16 values); a digit q in 0..2 means q - 1. Digits are read by multiplying the
// byte by 3^n (mod 256) and taking the top 2 bits of byte * 3 (ggml's fixed-point layout).
struct BlockTq1_0 {
  uint8_t qs[(kQK_K - 4 * kQK_K / 64) / 5];  // 48
  uint8_t qh[kQK_K / 64];                    // 4
  uint16_t d;
};
// Ternary, 2.0625 bpw: 2-bit digits (0..2, meaning -1..1), value 32*(4j+l)+m at qs[32j+m] bits 2l.
struct BlockTq2_0 {
  uint8_t qs[kQK_K / 4];
  uint16_t d;
};
// qs: per 32 values, two uint32: the first holds four 8-bit grid indices, the second four 7-bit
// sign groups (bits 0..27) and a 4-bit scale (bits 28..31).
struct BlockIq2Xxs {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
};
// qs: a 9-bit grid index and 7 sign bits per 8 values; scales: two 4-bit scales per 32 values.
struct BlockIq2Xs {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
// qs: 8-bit index low bits (32 bytes) then 8 sign bits per 8 values (32 bytes); qh: the index's
// 2 high bits, four per byte; scales: two 4-bit scales per 32 values.
struct BlockIq2S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
// qs: 64 8-bit grid indices (4 values each), then per 32 values a uint32 of four 7-bit sign
// groups and a 4-bit scale, as IQ2_XXS.
struct BlockIq3Xxs {
  uint16_t d;
  uint8_t qs[3 * kQK_K / 8];
};
// qs: index low bits (4 values each); qh: their ninth bits; signs: 8 explicit sign bits per 8
// values; scales: two 4-bit scales per 64 values.
struct BlockIq3S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
// qs: index low 8 bits per 8 values; qh per 32 values: three 3-bit index high parts (bits
// 0..11), a 3-bit scale (12..14) and the delta's sign (15).
struct BlockIq1S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};
// No d field: the f16 scale is spread over the top 4 bits of the four uint16 of `scales`, whose
// other bits are 3-bit scales per 16 values. qh per 8+8 values: 3 index high bits + delta sign.
struct BlockIq1M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};
// IQ4_NL's codebook with 6-bit scales per 32 values (low 4 bits in scales_l, high 2 in scales_h),
// biased by 32.
struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};

static_assert(sizeof(BlockTq1_0) == 54 && sizeof(BlockTq2_0) == 66);
static_assert(sizeof(BlockIq2Xxs) == 66 && sizeof(BlockIq2Xs) == 74 && sizeof(BlockIq2S) == 82);
static_assert(sizeof(BlockIq3Xxs) == 98 && sizeof(BlockIq3S) == 110);
static_assert(sizeof(BlockIq1S) == 50 && sizeof(BlockIq1M) == 56 && sizeof(BlockIq4Xs) == 136);

// One 8-bit lane j of a packed codebook entry.
inline uint8_t grid_byte(uint64_t entry, int j) { return uint8_t(entry >> (8 * j)); }

// A ternary digit: the top 2 bits of byte * 3, for the byte already multiplied by 3^n (mod 256).
inline int ternary_digit(uint8_t q) { return (uint16_t(q) * 3) >> 8; }

// IQ1_M's f16 super-block scale, gathered from the top nibbles of its four scale words.
inline uint16_t iq1_m_scale_bits(const BlockIq1M& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  return uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

// IQ4_XS's 6-bit scale of 32-value group ib, less its bias of 32.
inline int iq4_xs_scale(const BlockIq4Xs& b, int ib) {
  return (((b.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b.scales_h >> 2 * ib) & 3) << 4)) - 32;
}

}  // namespace sluice::kernels::cpu
