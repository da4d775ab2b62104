// Scalar dequantization of the 256-value k-quant super-blocks (and Q8_K, for tests).
// Float expressions keep ggml's evaluation order so results match its to_float bit for bit.
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float dmin = fp16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * float(sc & 0xF);
          const float ml = dmin * float(sc >> 4);
          for (int l = 0; l < 16; ++l) *dst++ = dl * float((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = fp16_to_f32(x[i].d);
    int8_t scales[16];
    unpack_q3_k_scales(x[i].scales, scales);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * float(scales[is++]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *dst++ = dl * float(v);
          }
        }
      }
    }
  }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float dmin = fp16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float dmin = fp16_to_f32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2)) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, dst += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l + 0] = d * float(sc[is + 0]) * float(q1);
        dst[l + 32] = d * float(sc[is + 2]) * float(q2);
        dst[l + 64] = d * float(sc[is + 4]) * float(q3);
        dst[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K)
    for (int j = 0; j < kQK_K; ++j) dst[j] = x[i].d * float(x[i].qs[j]);
}

}  // namespace sluice::kernels::cpu
