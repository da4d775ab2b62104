// Scalar emulation of ggml's AVX-512 ggml_v_expf (adapted there from Arm's optimized routines;
// max error ~1.5 ulp). ggml applies it to every full 16-lane block of silu/swiglu and softmax
// on AVX-512 machines (the reference build), and libm expf to the tail. Matching it bit for
// bit keeps activations that are later quantized (Q8_0/Q8_K) on the same side of each rounding
// step as llama.cpp. Each fmadd is one std::fma, so the emulation is exact on any CPU.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sluice::kernels::detail {

inline float ggml_v_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : std::numeric_limits<float>::infinity();
  // j lies in about [0.7, 1.5], so for -125 <= n <= 126 the result is a normal float and
  // j * 2^n (2^n built from its bits) is exact: ldexp's value without its libm call.
  const int e = static_cast<int>(n);
  if (e >= -125 && e <= 126) return j * std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  return std::ldexp(j, e);
}

// _mm512_reduce_add_ps as GCC implements it: halves, then quarters, then pairs.
inline float reduce_add_16(const float* a) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = a[8 + i] + a[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  const float t80 = t6[0] + t6[2];
  const float t81 = t6[1] + t6[3];
  return t80 + t81;
}

}  // namespace sluice::kernels::detail
