// Scalar dequantization of the float formats and the 32-value block formats.
// Float expressions keep ggml's evaluation order so results match its to_float bit for bit.
#include <cstring>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(x[i]);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = float((x[i].qs[j] & 0x0F) - 8) * d;
      dst[j + kQK / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_f32(x[i].d);
    const float m = fp16_to_f32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = float(x[i].qs[j] & 0x0F) * d + m;
      dst[j + kQK / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_f32(x[i].d);
    const uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh0 = uint8_t(((qh >> j) << 4) & 0x10);
      const uint8_t xh1 = uint8_t((qh >> (j + 12)) & 0x10);
      dst[j] = float(((x[i].qs[j] & 0x0F) | xh0) - 16) * d;
      dst[j + kQK / 2] = float(((x[i].qs[j] >> 4) | xh1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_f32(x[i].d);
    const float m = fp16_to_f32(x[i].m);
    const uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh0 = uint8_t(((qh >> j) << 4) & 0x10);
      const uint8_t xh1 = uint8_t((qh >> (j + 12)) & 0x10);
      dst[j] = float((x[i].qs[j] & 0x0F) | xh0) * d + m;
      dst[j + kQK / 2] = float((x[i].qs[j] >> 4) | xh1) * d + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(x[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(x[i].qs[j]) * d;
  }
}

void dequantize_mxfp4(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockMxfp4*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = e8m0_to_f32_half(x[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = float(kMxfp4Values[x[i].qs[j] & 0x0F]) * d;
      dst[j + kQK / 2] = float(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = d * float(kIq4NlValues[x[i].qs[j] & 0x0F]);
      dst[j + kQK / 2] = d * float(kIq4NlValues[x[i].qs[j] >> 4]);
    }
  }
}

}  // namespace sluice::kernels::cpu
