#include "kernels/ggml_simd.h"

#include <cmath>

namespace sluice::kernels {

namespace {

// _mm512_reduce_add_ps as GCC expands it.
float reduce16(const float* a) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = a[i + 8] + a[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

}  // namespace

float expf_simd(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, static_cast<int>(n));
}

void silu_simd(std::span<const float> x, int64_t row, std::span<float> y) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t full = row / kGgmlSimdWidth * kGgmlSimdWidth;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = (i % row) < full ? expf_simd(0.0f - v) : std::exp(-v);
    y[i] = v / (1.0f + e);
  }
}

float dot_f32_ggml(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) acc[j][l] = std::fma(x[i + j * 16 + l], y[i + j * 16 + l], acc[j][l]);
  for (int l = 0; l < 16; ++l) {
    acc[0][l] += acc[2][l];
    acc[1][l] += acc[3][l];
  }
  for (int l = 0; l < 16; ++l) acc[0][l] += acc[1][l];
  double sum = reduce16(acc[0]);
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

float dot_f32_tinyblas(const float* x, const float* y, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(x[i + l], y[i + l], acc[l]);
  return reduce16(acc);
}

void softmax_simd(std::span<float> x, float scale) {
  float max = -INFINITY;
  for (float& v : x) {
    v *= scale;
    max = v > max ? v : max;
  }
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); i += kGgmlSimdWidth) {
    for (size_t l = 0; l < kGgmlSimdWidth; ++l) x[i + l] = expf_simd(x[i + l] - max);
    sum += static_cast<double>(reduce16(&x[i]));
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

}  // namespace sluice::kernels
