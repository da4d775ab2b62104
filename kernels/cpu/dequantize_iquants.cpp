// Scalar dequantization of the i-quants (IQ1_S .. IQ4_XS) and the ternary types (TQ1_0, TQ2_0).
// Float expressions keep ggml's evaluation order so results match its to_float bit for bit.
#include <cstring>

#include "kernels/cpu/blocks_iq.h"
#include "kernels/cpu/iq1_tables.h"
#include "kernels/cpu/iq2_tables.h"
#include "kernels/cpu/iq3_tables.h"
#include "kernels/cpu/iq_sign_tables.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {
namespace {

constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};

inline float sign_of(uint8_t signs, int j) { return signs & kMaskIq2xs[j] ? -1.f : 1.f; }

}  // namespace

void dequantize_tq1_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockTq1_0*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    // 32 bytes x 5 digits, then 16 bytes x 5 digits, then qh's 4 bytes x 4 digits.
    for (int n3 = 0; n3 < 5; ++n3)
      for (int m = 0; m < 32; ++m) *y++ = float(ternary_digit(uint8_t(x[i].qs[m] * kPow3[n3])) - 1) * d;
    for (int n3 = 0; n3 < 5; ++n3)
      for (int m = 32; m < 48; ++m) *y++ = float(ternary_digit(uint8_t(x[i].qs[m] * kPow3[n3])) - 1) * d;
    for (int n3 = 0; n3 < 4; ++n3)
      for (int j = 0; j < 4; ++j) *y++ = float(ternary_digit(uint8_t(x[i].qh[j] * kPow3[n3])) - 1) * d;
  }
}

void dequantize_tq2_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockTq2_0*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < 64; j += 32)
      for (int l = 0; l < 4; ++l)
        for (int m = 0; m < 32; ++m) *y++ = float(((x[i].qs[j + m] >> (2 * l)) & 3) - 1) * d;
  }
}

void dequantize_iq2_xxs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq2Xxs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t aux[2];
      std::memcpy(aux, x[i].qs + 4 * ib, 8);
      const float db = d * (0.5f + float(aux[1] >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t g = kIq2xxsGrid[(aux[0] >> (8 * l)) & 0xff];
        const uint8_t signs = kSignsIq2xs[(aux[1] >> (7 * l)) & 127];
        for (int j = 0; j < 8; ++j) y[j] = db * float(grid_byte(g, j)) * sign_of(signs, j);
      }
    }
  }
}

void dequantize_iq2_xs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq2Xs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const float db[2] = {d * (0.5f + float(x[i].scales[ib] & 0xf)) * 0.25f,
                           d * (0.5f + float(x[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = x[i].qs[4 * ib + l];
        const uint64_t g = kIq2xsGrid[q & 511];
        const uint8_t signs = kSignsIq2xs[q >> 9];
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * float(grid_byte(g, j)) * sign_of(signs, j);
      }
    }
  }
}

void dequantize_iq2_s(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq2S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* qs = x[i].qs;
    const uint8_t* signs = x[i].qs + kQK_K / 8;
    for (int ib = 0; ib < 8; ++ib, qs += 4, signs += 4) {
      const float db[2] = {d * (0.5f + float(x[i].scales[ib] & 0xf)) * 0.25f,
                           d * (0.5f + float(x[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t g = kIq2sGrid[qs[l] | ((x[i].qh[ib] << (8 - 2 * l)) & 0x300)];
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * float(grid_byte(g, j)) * sign_of(signs[l], j);
      }
    }
  }
}

void dequantize_iq3_xxs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq3Xxs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, qs += 8) {
      uint32_t aux;
      std::memcpy(&aux, x[i].qs + kQK_K / 4 + 4 * ib, 4);
      const float db = d * (0.5f + float(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t signs = kSignsIq2xs[(aux >> (7 * l)) & 127];
        const uint32_t g1 = kIq3xxsGrid[qs[2 * l]], g2 = kIq3xxsGrid[qs[2 * l + 1]];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * float(grid_byte(g1, j)) * sign_of(signs, j);
          y[j + 4] = db * float(grid_byte(g2, j)) * sign_of(signs, j + 4);
        }
      }
    }
  }
}

void dequantize_iq3_s(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq3S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* qs = x[i].qs;
    const uint8_t* signs = x[i].signs;
    for (int ib = 0; ib < 8; ++ib, qs += 8, signs += 4) {
      const int nibble = ib % 2 == 0 ? (x[i].scales[ib / 2] & 0xf) : (x[i].scales[ib / 2] >> 4);
      const float db = d * float(1 + 2 * nibble);
      const int qh = x[i].qh[ib];
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint32_t g1 = kIq3sGrid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)];
        const uint32_t g2 = kIq3sGrid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * float(grid_byte(g1, j)) * sign_of(signs[l], j);
          y[j + 4] = db * float(grid_byte(g2, j)) * sign_of(signs[l], j + 4);
        }
      }
    }
  }
}

void dequantize_iq1_s(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq1S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, qs += 4) {
      const uint16_t qh = x[i].qh[ib];
      const float dl = d * float(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t g = kIq1sGrid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (float(int8_t(grid_byte(g, j))) + delta);
      }
    }
  }
}

void dequantize_iq1_m(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq1M*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, 8);
    const float d = fp16_to_f32(iq1_m_scale_bits(x[i]));
    const uint8_t* qs = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int ib = 0; ib < 8; ++ib, qs += 4, qh += 2) {
      const float dl[2] = {d * float(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1),
                           d * float(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1)};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t h = qh[l / 2];
        const int idx = qs[l] | ((l % 2 == 0 ? (h << 8) : (h << 4)) & 0x700);
        const float delta = h & (l % 2 == 0 ? 0x08 : 0x80) ? -kIq1Delta : kIq1Delta;
        const uint64_t g = kIq1sGrid[idx];
        for (int j = 0; j < 8; ++j) y[j] = dl[l / 2] * (float(int8_t(grid_byte(g, j))) + delta);
      }
    }
  }
}

void dequantize_iq4_xs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq4Xs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, qs += 16, y += 32) {
      const float dl = d * float(iq4_xs_scale(x[i], ib));
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(kIq4NlValues[qs[j] & 0xf]);
        y[j + 16] = dl * float(kIq4NlValues[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace sluice::kernels::cpu
