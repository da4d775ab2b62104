// Scalar dot products of the 32-value block formats with Q8_0 / Q8_1 activations.
// Per block: an exact integer dot product, then one float scale (ggml's order: int sum times the
// combined scale, accumulated in f32).
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

float vec_dot_iq4_nl(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kIq4NlValues[x[i].qs[j] & 0x0F] * y[i].qs[j];
      sumi += kIq4NlValues[x[i].qs[j] >> 4] * y[i].qs[j + kQK / 2];
    }
    sum += float(sumi) * (fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d));
  }
  return sum;
}

}  // namespace sluice::kernels::cpu
