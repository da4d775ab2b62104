// Scalar helpers shared by the per-type dequantizers (dequant_float.cuh, dequant_legacy.cuh,
// dequant_kquants.cuh, dequant_iquants.cuh, dequant_ternary.cuh). Everything is
// __host__ __device__ so tests run the same code on the CPU and compare it bit for bit with the
// CPU layer (kernels/cpu/blocks.h).
//
// The dequantizer contract, one struct per type:
//   kQK     values per block            kBytes  bytes per block (ggml's type_size)
//   kRun    values per call of run()    (kQK / kRun calls cover a block)
//   kAlign  alignment the block's fields need (rows and the matrix base must honor it)
//   run(block, j, out): out[0..kRun) = values j*kRun .. j*kRun + kRun - 1 of the block, each
//   computed with the CPU layer's float expression (same operands, same order).
// Device code may contract a*b+c into an FMA (nvcc's default), so on the GPU results can differ
// from the CPU's in the last bit; the host path (what tests/test_cuda_dequant_host.cu checks) is
// exact.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define SLUICE_HD __host__ __device__ __forceinline__
#else
#define SLUICE_HD inline
#endif

namespace sluice::kernels::cuda::dq {

SLUICE_HD float as_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

SLUICE_HD uint16_t load_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);  // callers guarantee 2-byte alignment
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

// Four bytes at a 2-byte aligned address (Q5_0/Q5_1's qh sits at offset 2 or 4 of 22/24-byte
// blocks, so 4-byte loads could be misaligned).
SLUICE_HD uint32_t load_u32_a2(const uint8_t* p) { return uint32_t(load_u16(p)) | uint32_t(load_u16(p + 2)) << 16; }

// Eight consecutive bytes from a 2-byte aligned address, fetched as four 16-bit loads (half the
// load instructions of byte loads; every run() below reads its 8 quant bytes this way).
struct Bytes8 {
  uint32_t lo, hi;  // bytes 0..3, 4..7, little-endian
  SLUICE_HD uint32_t operator[](int r) const { return ((r < 4 ? lo : hi) >> (8 * (r & 3))) & 0xFF; }
};
SLUICE_HD Bytes8 load8_a2(const uint8_t* p) { return Bytes8{load_u32_a2(p), load_u32_a2(p + 4)}; }

// Exact float of a small unsigned integer (n < 2^23) without an int->float conversion, which
// runs at a quarter of the FMA rate on the GPU: the bits 0x4B000000 | n are 2^23 + n.
SLUICE_HD float small_uint_to_float(uint32_t n) { return as_float(0x4B000000u | n) - 8388608.0f; }
// Exact float(int(n) - bias) for n, bias < 2^23 (both sides are integers below 2^24).
SLUICE_HD float biased_uint_to_float(uint32_t n, uint32_t bias) {
  return as_float(0x4B000000u | n) - float(8388608u + bias);
}

// IEEE half -> float, exact; the host branch is blocks.h's fp16_to_f32.
SLUICE_HD float fp16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return as_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return as_float(sign | ((exp + 112) << 23) | (mant << 13));
  const float v = float(mant) * 0x1p-24f;
  return sign ? -v : v;
#endif
}

SLUICE_HD float bf16_to_f32(uint16_t h) { return as_float(uint32_t(h) << 16); }

// E8M0 scale 2^(e-127), halved to match the doubled E2M1 code points (blocks.h).
SLUICE_HD float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (uint32_t(e - 1) << 23);
  return as_float(bits);
}

// kMxfp4Values[c] (doubled E2M1): magnitudes 0,1,2,3,4,6,8,12 packed as nibbles, bit 3 = sign.
// A lookup in registers: a table array would land in local memory on the GPU.
SLUICE_HD int mxfp4_value(uint32_t c) {
  const int mag = int((0xC8643210u >> (4 * (c & 7))) & 0xF);
  return (c & 8) ? -mag : mag;
}

// kIq4NlValues[c]: 16 signed bytes in four little-endian words.
SLUICE_HD int iq4_nl_value(uint32_t c) {
  // {-127,-104,-83,-65}, {-49,-35,-22,-10}, {1,13,25,38}, {53,69,89,113}
  const uint32_t w = c < 4 ? 0xBFAD9881u : c < 8 ? 0xF6EADDCFu : c < 12 ? 0x26190D01u : 0x71594535u;
  return int(int8_t(uint8_t(w >> (8 * (c & 3)))));
}

}  // namespace sluice::kernels::cuda::dq
