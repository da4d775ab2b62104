// Scalar dot products of the 32-value block formats with Q8_0 / Q8_1 activations.
// Per block: an exact integer dot product, then one float scale (ggml's order: int sum times the
// combined scale, accumulated in f32).
#include <cmath>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

float vec_dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + kQK / 2];
    }
    sum += float(sumi) * (fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d));
  }
  return sum;
}

float vec_dot_q4_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
      sumi += (x[i].qs[j] >> 4) * y[i].qs[j + kQK / 2];
    }
    sum +=
        float(sumi) * (fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)) + fp16_to_f32(x[i].m) * fp16_to_f32(y[i].s);
  }
  return sum;
}

float vec_dot_q5_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int xh0 = int(((qh >> j) << 4) & 0x10);
      const int xh1 = int((qh >> (j + 12)) & 0x10);
      sumi += (((x[i].qs[j] & 0x0F) | xh0) - 16) * y[i].qs[j];
      sumi += (((x[i].qs[j] >> 4) | xh1) - 16) * y[i].qs[j + kQK / 2];
    }
    sum += float(sumi) * (fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d));
  }
  return sum;
}

float vec_dot_q5_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int xh0 = int(((qh >> j) << 4) & 0x10);
      const int xh1 = int((qh >> (j + 12)) & 0x10);
      sumi += ((x[i].qs[j] & 0x0F) | xh0) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) | xh1) * y[i].qs[j + kQK / 2];
    }
    sum +=
        float(sumi) * (fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)) + fp16_to_f32(x[i].m) * fp16_to_f32(y[i].s);
  }
  return sum;
}

float vec_dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum += float(sumi) * (fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d));
  }
  return sum;
}

float vec_dot_mxfp4(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kMxfp4Values[x[i].qs[j] & 0x0F] * y[i].qs[j];
      sumi += kMxfp4Values[x[i].qs[j] >> 4] * y[i].qs[j + kQK / 2];
    }
    sum += float(sumi) * (fp16_to_f32(y[i].d) * e8m0_to_f32_half(x[i].e));
  }
  return sum;
}

// IQ4_NL has three x86 orders in llama.cpp, one per path its CPU backend takes (see scalar.h);
// all three sum the same exact integers, lane k of a block holding values 4k..4k+3 (low nibbles
// are values 0..15, high nibbles 16..31), as maddubs + madd leave them.
namespace {

void iq4_nl_lanes(const BlockIq4Nl& x, const BlockQ8_0& y, int32_t lanes[8]) {
  for (int k = 0; k < 8; ++k) lanes[k] = 0;
  for (int j = 0; j < kQK; ++j) {
    const int q = j < kQK / 2 ? (x.qs[j] & 0x0F) : (x.qs[j - kQK / 2] >> 4);
    lanes[j / 4] += kIq4NlValues[q] * y.qs[j];
  }
}

// ggml's hsum_float_8 (and tinyBLAS's hsum): the two 128-bit halves added, then pairs, then the
// last two.
float hsum_lanes(const float a[8]) {
  const float r0 = a[0] + a[4], r1 = a[1] + a[5], r2 = a[2] + a[6], r3 = a[3] + a[7];
  return (r0 + r2) + (r1 + r3);
}

void fma_block(float acc[8], const BlockIq4Nl& x, const BlockQ8_0& y) {
  int32_t l[8];
  iq4_nl_lanes(x, y, l);
  const float d = fp16_to_f32(y.d) * fp16_to_f32(x.d);
  for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, float(l[k]), acc[k]);
}

}  // namespace

float vec_dot_iq4_nl(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  float even[8] = {}, odd[8] = {};
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    fma_block(even, x[i], y[i]);
    fma_block(odd, x[i + 1], y[i + 1]);
  }
  float both[8];
  for (int k = 0; k < 8; ++k) both[k] = even[k] + odd[k];
  float sum = hsum_lanes(both);
  for (; i < nb; ++i) {  // ggml's scalar tail, for an odd block count
    int32_t l[8];
    iq4_nl_lanes(x[i], y[i], l);
    int32_t sumi = 0;
    for (int k = 0; k < 8; ++k) sumi += l[k];
    sum = std::fma(fp16_to_f32(y[i].d) * fp16_to_f32(x[i].d), float(sumi), sum);
  }
  return sum;
}

float vec_dot_iq4_nl_llamafile(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t l[8];
    iq4_nl_lanes(x[i], y[i], l);
    const float d = fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, float(l[k]), acc[k]);
  }
  return hsum_lanes(acc);
}

float vec_dot_iq4_nl_repack(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t l[8];
    iq4_nl_lanes(x[i], y[i], l);
    int32_t sumi = 0;
    for (int k = 0; k < 8; ++k) sumi += l[k];
    acc = std::fma(float(sumi), fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d), acc);
  }
  return acc;
}

}  // namespace sluice::kernels::cpu
