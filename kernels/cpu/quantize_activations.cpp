// Scalar quantization of activation rows into the formats dot products consume.
//
// Q8_0/Q8_1 follow ggml's x86 AVX path, not its plain-C reference: the inverse scale is
// 127/amax (one division per block), each value is multiplied by it and rounded half to even
// (_mm256_round_ps), whereas the C reference divides by d and rounds half away from zero. The
// reference data comes from an x86 build, so this is the rounding that reproduces it.
// Q8_K on x86 uses ggml's reference code (nearest_int, also half to even).
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {
namespace {

// Round half to even (ggml's nearest_int): adding 1.5*2^23 makes the FPU's default rounding
// mode round at the units place. Valid for |v| < 2^22; quantized values stay within +-128.
// (No -ffast-math anywhere in sluice, so the compiler keeps the add as written.)
inline int round_even(float v) {
  const float t = v + 12582912.0f;
  return int(std::bit_cast<int32_t>(t) & 0x007fffff) - 0x00400000;
}

// amax of 32 floats as _mm256_max_ps computes it (NaN handling aside, plain max is the same).
inline float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  return amax;
}

}  // namespace

void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(src[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(src[i]);
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float amax = block_amax(src, kQK);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = int8_t(round_even(src[j] * id));
  }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float amax = block_amax(src, kQK);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int q = round_even(src[j] * id);
      y[i].qs[j] = int8_t(q);
      sum += q;
    }
    y[i].d = f32_to_fp16(d);
    y[i].s = f32_to_fp16(d * float(sum));
  }
}

void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    // The signed value of largest magnitude (first one on ties) sets the scale's sign.
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(src[j]);
      if (ax > amax) {
        amax = ax;
        max = src[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // -127 rather than -128 keeps every value in [-127, 127] (ggml's IQ kernels rely on it).
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = round_even(iscale * src[j]);
      y[i].qs[j] = int8_t(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[g * 16 + l];
      y[i].bsums[g] = int16_t(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace sluice::kernels::cpu
