// ggml's block layouts and scalar number formats, as the CPU kernels see them.
//
// Every struct here is byte-for-byte the layout ggml writes into GGUF files (little-endian,
// no padding; the static_asserts pin the sizes to common/ggml_type.cpp's table). Half-precision
// fields are kept as raw uint16_t bits and converted with the helpers below, which round exactly
// as x86 F16C does (round to nearest, ties to even), so scalar and SIMD code agree bit for bit.
//
// Internal to kernels/: callers outside this folder use the byte-oriented API in kernels/quant.h.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace sluice::kernels::cpu {

constexpr int kQK = 32;     // values per block of the legacy formats (Q4_0 .. Q8_1, MXFP4, IQ4_NL)
constexpr int kQK_K = 256;  // values per super-block of the k-quants
constexpr int kKScaleSize = 12;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// s = d * sum(qs), precomputed so that Q4_1/Q5_1 dot products can add the min term cheaply.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};
// e: shared E8M0 exponent; qs: 4-bit indices into kMxfp4Values (low nibbles = values 0..15).
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// 16 sub-blocks of 16: 4-bit scale (low nibble) and 4-bit min (high nibble) per sub-block.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// 2 low bits in qs, the third bit in hmask (set = no offset, clear = subtract 4); 16 6-bit scales
// packed into 12 bytes, biased by 32.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes (see scale_min_k4).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 4 low bits in ql, 2 high bits in qh, values biased by 32; 16 signed 8-bit scales.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// The k-quants' activation format: f32 scale, and per-16 sums of qs for the min terms.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockMxfp4) == 17 && sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

// MXFP4 (E2M1) code points, doubled so they are integers; the block scale is halved to match.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// IQ4_NL's non-linear 4-bit code points.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// ---- scalar formats ----

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal half: mant * 2^-24, exact in f32.
  const float v = float(mant) * 0x1p-24f;
  return sign ? -v : v;
}

// Round to nearest even, as F16C's vcvtps2ph with imm 0 does (overflow -> inf, NaN stays NaN).
inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)
    return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520: overflow
  if (ax < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24 rounded to nearest even integer.
    if (ax < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // m * 2^(e-150) / 2^-24 = m >> (126 - e)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  // Normal: rebias and round the 13 dropped mantissa bits to nearest even.
  uint32_t r = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// ggml's fp32 -> bf16: round to nearest even, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 64);
  return uint16_t((x + (0x7fffu + ((x >> 16) & 1))) >> 16);
}

// E8M0 scale 2^(e-127), halved because kMxfp4Values are doubled. e = 0 and 1 land in f32
// subnormals, which ggml spells out with explicit bit patterns.
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (uint32_t(e - 1) << 23);
  return std::bit_cast<float>(bits);
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: the 16 scales (biased by 32) unpacked from 12 bytes into signed bytes.
inline void unpack_q3_k_scales(const uint8_t* packed, int8_t out[16]) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(out, aux, 16);
  for (int i = 0; i < 16; ++i) out[i] = int8_t(out[i] - 32);
}

}  // namespace sluice::kernels::cpu
