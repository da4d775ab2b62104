// Reference quantizers for the 32-value weight formats. Each block's scale comes from a small
// least-squares search (fit.h); the values are then re-quantized against the scale as stored
// (after f16 rounding), so what dequantizes is what was fitted.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/fit.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {
namespace {

// Symmetric block: stores d and returns the integer values (q in [qmin, qmax]).
void quantize_symmetric_block(const float* x, int qmin, int qmax, uint16_t* d_out, int q[kQK]) {
  int8_t fitted[kQK];
  const uint16_t d16 = f32_to_fp16(fit_symmetric(x, kQK, qmin, qmax, fitted));
  const float d = fp16_to_f32(d16);
  for (int j = 0; j < kQK; ++j) q[j] = d != 0.0f ? std::clamp(nearest_int(x[j] / d), qmin, qmax) : 0;
  *d_out = d16;
}

// Affine block (y = q*d + m): stores d and m and returns q in [0, qmax].
void quantize_affine_block(const float* x, int qmax, uint16_t* d_out, uint16_t* m_out, int q[kQK]) {
  uint8_t fitted[kQK];
  float scale, offset;
  fit_affine(x, kQK, qmax, /*any_offset=*/true, fitted, &scale, &offset);
  const uint16_t d16 = f32_to_fp16(std::max(scale, 0.0f));
  const uint16_t m16 = f32_to_fp16(-offset);
  const float d = fp16_to_f32(d16), m = fp16_to_f32(m16);
  for (int j = 0; j < kQK; ++j) q[j] = d != 0.0f ? std::clamp(nearest_int((x[j] - m) / d), 0, qmax) : 0;
  *d_out = d16;
  *m_out = m16;
}

void pack_nibbles(const int q[kQK], uint8_t qs[kQK / 2]) {
  for (int j = 0; j < kQK / 2; ++j) qs[j] = uint8_t((q[j] & 0xF) | ((q[j + kQK / 2] & 0xF) << 4));
}

// Q5 formats: bit 4 of value j goes to bit j of qh.
void pack_fifth_bits(const int q[kQK], uint8_t qh[4]) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= uint32_t((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, 4);
}

// Best code-point assignment of x for scale d (values are the code points).
double code_error(const float* x, const int8_t* values, float d, uint8_t* idx) {
  double err = 0;
  for (int j = 0; j < kQK; ++j) {
    idx[j] = uint8_t(d != 0.0f ? nearest_code(values, 16, x[j] / d) : 0);
    const double e = double(d) * values[idx[j]] - x[j];
    err += e * e;
  }
  return err;
}

}  // namespace

void quantize_q4_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    int q[kQK];
    quantize_symmetric_block(src, -8, 7, &y[i].d, q);
    for (int& v : q) v += 8;
    pack_nibbles(q, y[i].qs);
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    int q[kQK];
    quantize_symmetric_block(src, -16, 15, &y[i].d, q);
    for (int& v : q) v += 16;
    pack_nibbles(q, y[i].qs);
    pack_fifth_bits(q, y[i].qh);
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    int q[kQK];
    quantize_affine_block(src, 15, &y[i].d, &y[i].m, q);
    pack_nibbles(q, y[i].qs);
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    int q[kQK];
    quantize_affine_block(src, 31, &y[i].d, &y[i].m, q);
    pack_nibbles(q, y[i].qs);
    pack_fifth_bits(q, y[i].qh);
  }
}

void quantize_mxfp4(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockMxfp4*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    // ggml's choice maps amax near the top code point; try one exponent either side as well.
    const int e0 = amax > 0.0f ? int(std::floor(std::log2(amax))) - 2 + 127 : 0;
    double best = -1;
    uint8_t idx[kQK], best_idx[kQK] = {};
    uint8_t best_e = uint8_t(std::clamp(e0, 0, 254));
    for (int e = std::max(e0 - 1, 0); e <= std::min(e0 + 1, 254); ++e) {
      const double err = code_error(src, kMxfp4Values, e8m0_to_f32_half(uint8_t(e)), idx);
      if (best < 0 || err < best) {
        best = err;
        best_e = uint8_t(e);
        std::memcpy(best_idx, idx, kQK);
      }
    }
    y[i].e = best_e;
    for (int j = 0; j < kQK / 2; ++j) y[i].qs[j] = uint8_t(best_idx[j] | (best_idx[j + kQK / 2] << 4));
  }
}

void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIq4Nl*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    uint8_t idx[kQK], best_idx[kQK] = {};
    uint16_t best_d = 0;
    double best = -1;
    if (amax > 0.0f) {
      // Candidate scales put the extreme value near either end code point; each assignment's
      // scale is then refit by least squares and rounded to f16 before scoring.
      for (int step = -12; step <= 12; ++step) {
        for (float end : {-127.0f, 113.0f}) {
          const float d0 = max / (end + float(step) * 2.0f);
          code_error(src, kIq4NlValues, d0, idx);
          double sxv = 0, svv = 0;
          for (int j = 0; j < kQK; ++j) {
            sxv += double(src[j]) * kIq4NlValues[idx[j]];
            svv += double(kIq4NlValues[idx[j]]) * kIq4NlValues[idx[j]];
          }
          const uint16_t d16 = f32_to_fp16(svv > 0 ? float(sxv / svv) : d0);
          const double err = code_error(src, kIq4NlValues, fp16_to_f32(d16), idx);
          if (best < 0 || err < best) {
            best = err;
            best_d = d16;
            std::memcpy(best_idx, idx, kQK);
          }
        }
      }
    }
    y[i].d = best_d;
    for (int j = 0; j < kQK / 2; ++j) y[i].qs[j] = uint8_t(best_idx[j] | (best_idx[j + kQK / 2] << 4));
  }
}

}  // namespace sluice::kernels::cpu
