// Reference quantizers for the k-quant weight formats.
//
// Two levels, as ggml does: fit a scale (and min) per sub-block by least-squares search
// (fit.h), quantize those sub-block scales against one f16 super-block scale, then re-quantize
// the values against the scales exactly as they will dequantize.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/fit.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {
namespace {

struct AffineSubBlocks {
  float scale[16];
  float min[16];
};

// Sub-block scales and mins -> integer codes in [0, levels] against super-block d and dmin.
void quantize_scales(const AffineSubBlocks& fit, int n_sub, int levels, uint16_t* d16, uint16_t* dmin16,
                     uint8_t* sc, uint8_t* mn) {
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < n_sub; ++j) {
    max_scale = std::max(max_scale, fit.scale[j]);
    max_min = std::max(max_min, fit.min[j]);
  }
  const float inv_scale = max_scale > 0 ? float(levels) / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? float(levels) / max_min : 0.0f;
  for (int j = 0; j < n_sub; ++j) {
    sc[j] = uint8_t(std::clamp(nearest_int(inv_scale * fit.scale[j]), 0, levels));
    mn[j] = uint8_t(std::clamp(nearest_int(inv_min * fit.min[j]), 0, levels));
  }
  *d16 = f32_to_fp16(max_scale / float(levels));
  *dmin16 = f32_to_fp16(max_min / float(levels));
}

// Values of one affine sub-block against its final scale and min.
void requantize_affine(const float* x, int n, float d, float m, int qmax, uint8_t* q) {
  for (int j = 0; j < n; ++j) q[j] = uint8_t(d > 0 ? std::clamp(nearest_int((x[j] + m) / d), 0, qmax) : 0);
}

// Symmetric sub-blocks of 16: returns the super-block scale d and per-sub-block integer scales
// (in [-smax-1, smax]), then writes values in [qmin, qmax] shifted by -qmin.
uint16_t quantize_symmetric_16(const float* x, int qmin, int qmax, int smax, int scales[16],
                               uint8_t L[kQK_K]) {
  float sub_scale[16];
  int8_t tmp[16];
  float max_scale = 0.0f, amax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    sub_scale[j] = fit_symmetric(x + 16 * j, 16, qmin, qmax, tmp);
    if (std::fabs(sub_scale[j]) > amax) {
      amax = std::fabs(sub_scale[j]);
      max_scale = sub_scale[j];
    }
  }
  if (amax == 0.0f) {
    std::fill(scales, scales + 16, 0);
    std::fill(L, L + kQK_K, uint8_t(-qmin));
    return 0;
  }
  const float iscale = -float(smax + 1) / max_scale;
  for (int j = 0; j < 16; ++j) scales[j] = std::clamp(nearest_int(iscale * sub_scale[j]), -smax - 1, smax);
  const uint16_t d16 = f32_to_fp16(1.0f / iscale);
  const float d = fp16_to_f32(d16);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(scales[j]);
    for (int l = 0; l < 16; ++l) {
      const int v = dl != 0.0f ? std::clamp(nearest_int(x[16 * j + l] / dl), qmin, qmax) : 0;
      L[16 * j + l] = uint8_t(v - qmin);
    }
  }
  return d16;
}

// Q2_K/Q3_K layout: 2 bits per value, four groups of 32 interleaved per 128-value half.
void pack_2bit(const uint8_t L[kQK_K], uint8_t qs[kQK_K / 4]) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = uint8_t((L[j + l] & 3) | ((L[j + l + 32] & 3) << 2) | ((L[j + l + 64] & 3) << 4) |
                              ((L[j + l + 96] & 3) << 6));
}

// Q4_K/Q5_K: 8 6-bit scales and mins into 12 bytes (inverse of scale_min_k4).
void pack_scales_k4(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out[j] = sc[j];
      out[j + 4] = mn[j];
    } else {
      out[j + 4] = uint8_t((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      out[j - 4] |= uint8_t((sc[j] >> 4) << 6);
      out[j] |= uint8_t((mn[j] >> 4) << 6);
    }
  }
}

// Q4_K/Q5_K body: 8 sub-blocks of 32 with 6-bit scale and min; writes values in [0, qmax].
void quantize_k4_like(const float* x, int qmax, uint16_t* d16, uint16_t* dmin16, uint8_t scales[12],
                      uint8_t L[kQK_K]) {
  AffineSubBlocks fit{};
  for (int j = 0; j < 8; ++j) fit_affine(x + 32 * j, 32, qmax, false, L + 32 * j, &fit.scale[j], &fit.min[j]);
  uint8_t sc[8], mn[8];
  quantize_scales(fit, 8, 63, d16, dmin16, sc, mn);
  pack_scales_k4(sc, mn, scales);
  const float d = fp16_to_f32(*d16), dmin = fp16_to_f32(*dmin16);
  for (int j = 0; j < 8; ++j)
    requantize_affine(x + 32 * j, 32, d * float(sc[j]), dmin * float(mn[j]), qmax, L + 32 * j);
}

}  // namespace

void quantize_q2_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    uint8_t L[kQK_K];
    AffineSubBlocks fit{};
    for (int j = 0; j < 16; ++j)
      fit_affine(src + 16 * j, 16, 3, false, L + 16 * j, &fit.scale[j], &fit.min[j]);
    uint8_t sc[16], mn[16];
    quantize_scales(fit, 16, 15, &y[i].d, &y[i].dmin, sc, mn);
    const float d = fp16_to_f32(y[i].d), dmin = fp16_to_f32(y[i].dmin);
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = uint8_t(sc[j] | (mn[j] << 4));
      requantize_affine(src + 16 * j, 16, d * float(sc[j]), dmin * float(mn[j]), 3, L + 16 * j);
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_q3_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    uint8_t L[kQK_K];
    int scales[16];
    y[i].d = quantize_symmetric_16(src, -4, 3, 31, scales, L);
    // 16 6-bit scales (biased by 32): low nibbles in bytes 0..7, high 2 bits in bytes 8..11.
    std::memset(y[i].scales, 0, 12);
    for (int j = 0; j < 16; ++j) {
      const int l = scales[j] + 32;
      if (j < 8)
        y[i].scales[j] = uint8_t(l & 0xF);
      else
        y[i].scales[j - 8] |= uint8_t((l & 0xF) << 4);
      y[i].scales[j % 4 + 8] |= uint8_t((l >> 4) << (2 * (j / 4)));
    }
    // Bit 2 of each value goes to hmask (value j: byte j % 32, bit j / 32).
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[j % 32] |= uint8_t(1 << (j / 32));
        L[j] = uint8_t(L[j] - 4);
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    uint8_t L[kQK_K];
    quantize_k4_like(src, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    for (int j = 0; j < kQK_K; j += 64)
      for (int l = 0; l < 32; ++l) y[i].qs[j / 2 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_q5_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    uint8_t L[kQK_K];
    quantize_k4_like(src, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t m1 = 1, m2 = 2;
    for (int j = 0; j < kQK_K; j += 64, m1 = uint8_t(m1 << 2), m2 = uint8_t(m2 << 2)) {
      for (int l = 0; l < 32; ++l) {
        int l1 = L[j + l], l2 = L[j + l + 32];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[l] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[l] |= m2;
        }
        y[i].qs[j / 2 + l] = uint8_t(l1 | (l2 << 4));
      }
    }
  }
}

void quantize_q6_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    uint8_t L[kQK_K];
    int scales[16];
    y[i].d = quantize_symmetric_16(src, -32, 31, 127, scales, L);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = int8_t(scales[j]);
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* v = L + j + l;
        ql[l] = uint8_t((v[0] & 0xF) | ((v[64] & 0xF) << 4));
        ql[l + 32] = uint8_t((v[32] & 0xF) | ((v[96] & 0xF) << 4));
        qh[l] = uint8_t((v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
      }
    }
  }
}

}  // namespace sluice::kernels::cpu
