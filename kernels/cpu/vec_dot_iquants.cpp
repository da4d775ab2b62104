// Scalar dot products of the i-quants and ternary types with Q8_K activations.
//
// These follow the float order of ggml's x86 (AVX2) kernels, not its generic C: per super-block,
// the exact integer products land in eight int32 lanes, lane k holding values 4k..4k+3 of every
// 32-value group (what maddubs + madd leave in a 256-bit register), each times its sub-block
// scale; each lane is scaled by d and accumulated with one fma per super-block, and the eight
// accumulators are reduced as ggml's hsum_float_8 does. So the scalar reference and the AVX2
// kernels agree bit for bit, and both land on ggml's CPU result.
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks_iq.h"
#include "kernels/cpu/iq1_tables.h"
#include "kernels/cpu/iq2_tables.h"
#include "kernels/cpu/iq3_tables.h"
#include "kernels/cpu/iq_sign_tables.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {
namespace {

// One super-block decoded: 256 signed weights and one scale per 16 values.
struct Decoded {
  int8_t w[kQK_K];
  int16_t scale[16];
};

struct Lanes {
  int32_t v[8] = {};
};

Lanes lanes_of(const Decoded& b, const int8_t* q8) {
  Lanes l;
  for (int p = 0; p < kQK_K; ++p) l.v[(p % 32) / 4] += b.scale[p / 16] * b.w[p] * q8[p];
  return l;
}

void fma_lanes(float acc[8], float d, const Lanes& l) {
  for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, float(l.v[k]), acc[k]);
}

// ggml's hsum_float_8: the two 128-bit halves added, then pairs, then the last two.
float hsum8(const float a[8]) {
  const float r0 = a[0] + a[4], r1 = a[1] + a[5], r2 = a[2] + a[6], r3 = a[3] + a[7];
  return (r0 + r2) + (r1 + r3);
}

void set_scales(Decoded& out, int group32, int lo, int hi) {
  out.scale[2 * group32] = int16_t(lo);
  out.scale[2 * group32 + 1] = int16_t(hi);
}

// 8 grid magnitudes with their signs (bit j of `signs` set: value j negative).
void signed_bytes(int8_t* w, uint64_t entry, uint8_t signs) {
  for (int j = 0; j < 8; ++j) w[j] = int8_t(signs & kMaskIq2xs[j] ? -grid_byte(entry, j) : grid_byte(entry, j));
}

void decode(const BlockIq2Xxs& x, Decoded& out) {
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t aux[2];
    std::memcpy(aux, x.qs + 4 * ib, 8);
    const int ls = 2 * int(aux[1] >> 28) + 1;
    set_scales(out, ib, ls, ls);
    for (int l = 0; l < 4; ++l)
      signed_bytes(out.w + 32 * ib + 8 * l, kIq2xxsGrid[(aux[0] >> (8 * l)) & 0xff],
                   kSignsIq2xs[(aux[1] >> (7 * l)) & 127]);
  }
}

void decode(const BlockIq2Xs& x, Decoded& out) {
  for (int ib = 0; ib < 8; ++ib) {
    set_scales(out, ib, 2 * (x.scales[ib] & 0xf) + 1, 2 * (x.scales[ib] >> 4) + 1);
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = x.qs[4 * ib + l];
      signed_bytes(out.w + 32 * ib + 8 * l, kIq2xsGrid[q & 511], kSignsIq2xs[q >> 9]);
    }
  }
}

void decode(const BlockIq2S& x, Decoded& out) {
  const uint8_t* signs = x.qs + kQK_K / 8;
  for (int ib = 0; ib < 8; ++ib) {
    set_scales(out, ib, 2 * (x.scales[ib] & 0xf) + 1, 2 * (x.scales[ib] >> 4) + 1);
    for (int l = 0; l < 4; ++l)
      signed_bytes(out.w + 32 * ib + 8 * l, kIq2sGrid[x.qs[4 * ib + l] | ((x.qh[ib] << (8 - 2 * l)) & 0x300)],
                   signs[4 * ib + l]);
  }
}

// IQ3 entries hold 4 magnitudes: two entries make one group of 8 under one sign byte.
uint64_t pair_of(uint32_t lo, uint32_t hi) { return uint64_t(lo) | (uint64_t(hi) << 32); }

void decode(const BlockIq3Xxs& x, Decoded& out) {
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t aux;
    std::memcpy(&aux, x.qs + kQK_K / 4 + 4 * ib, 4);
    const int ls = 2 * int(aux >> 28) + 1;
    set_scales(out, ib, ls, ls);
    const uint8_t* q = x.qs + 8 * ib;
    for (int l = 0; l < 4; ++l)
      signed_bytes(out.w + 32 * ib + 8 * l, pair_of(kIq3xxsGrid[q[2 * l]], kIq3xxsGrid[q[2 * l + 1]]),
                   kSignsIq2xs[(aux >> (7 * l)) & 127]);
  }
}

void decode(const BlockIq3S& x, Decoded& out) {
  for (int ib = 0; ib < 8; ++ib) {
    const int nibble = ib % 2 == 0 ? (x.scales[ib / 2] & 0xf) : (x.scales[ib / 2] >> 4);
    set_scales(out, ib, 2 * nibble + 1, 2 * nibble + 1);
    const uint8_t* q = x.qs + 8 * ib;
    const int qh = x.qh[ib];
    for (int l = 0; l < 4; ++l)
      signed_bytes(out.w + 32 * ib + 8 * l,
                   pair_of(kIq3sGrid[q[2 * l] | ((qh << (8 - 2 * l)) & 256)],
                           kIq3sGrid[q[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)]),
                   x.signs[4 * ib + l]);
  }
}

void decode(const BlockIq4Xs& x, Decoded& out) {
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = iq4_xs_scale(x, ib);
    set_scales(out, ib, ls, ls);
    for (int j = 0; j < 16; ++j) {
      out.w[32 * ib + j] = kIq4NlValues[x.qs[16 * ib + j] & 0xf];
      out.w[32 * ib + j + 16] = kIq4NlValues[x.qs[16 * ib + j] >> 4];
    }
  }
}

void decode(const BlockIq1S& x, Decoded& out) {
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t qh = x.qh[ib];
    const int ls = 2 * ((qh >> 12) & 7) + 1;
    set_scales(out, ib, ls, ls);
    for (int l = 0; l < 4; ++l) {
      const uint64_t g = kIq1sGrid[x.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
      for (int j = 0; j < 8; ++j) out.w[32 * ib + 8 * l + j] = int8_t(grid_byte(g, j));
    }
  }
}

// IQ1_M: the grid values, and the deltas' signs (+-1 per 8 values) as a second weight row.
void decode(const BlockIq1M& x, Decoded& out, Decoded& delta) {
  uint16_t sc[4];
  std::memcpy(sc, x.scales, 8);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls1 = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
    const int ls2 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
    set_scales(out, ib, ls1, ls2);
    set_scales(delta, ib, ls1, ls2);
    for (int l = 0; l < 4; ++l) {
      const uint8_t h = x.qh[2 * ib + l / 2];
      const int idx = x.qs[4 * ib + l] | ((l % 2 == 0 ? (h << 8) : (h << 4)) & 0x700);
      const int8_t s = h & (l % 2 == 0 ? 0x08 : 0x80) ? -1 : 1;
      const uint64_t g = kIq1sGrid[idx];
      for (int j = 0; j < 8; ++j) {
        out.w[32 * ib + 8 * l + j] = int8_t(grid_byte(g, j));
        delta.w[32 * ib + 8 * l + j] = s;
      }
    }
  }
}

// The types whose whole result is `factor * hsum(acc)`, acc[k] += (x.d * y.d) * lane k.
template <class Block>
float grid_dot(const void* w, const void* act, int64_t n, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[8] = {};
  Decoded b;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(x[i], b);
    fma_lanes(acc, fp16_to_f32(x[i].d) * y[i].d, lanes_of(b, y[i].qs));
  }
  return factor * hsum8(acc);
}

// Ternary digits (0..2) as weights; the -1 offset comes off afterwards from Q8_K's 16-value sums,
// bsums[2k] and bsums[2k+1] from lane k, as ggml's AVX2 code subtracts them from its int16 lanes.
template <class Block, class DigitsFn>
float ternary_dot(const void* w, const void* act, int64_t n, DigitsFn digits) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[8] = {};
  Decoded b;
  for (int k = 0; k < 16; ++k) b.scale[k] = 1;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    digits(x[i], b.w);
    Lanes l = lanes_of(b, y[i].qs);
    for (int k = 0; k < 8; ++k) l.v[k] -= y[i].bsums[2 * k] + y[i].bsums[2 * k + 1];
    fma_lanes(acc, y[i].d * fp16_to_f32(x[i].d), l);
  }
  return hsum8(acc);
}

void tq1_0_digits(const BlockTq1_0& x, int8_t* w) {
  constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  for (int n3 = 0; n3 < 5; ++n3)
    for (int m = 0; m < 32; ++m) *w++ = int8_t(ternary_digit(uint8_t(x.qs[m] * kPow3[n3])));
  for (int n3 = 0; n3 < 5; ++n3)
    for (int m = 32; m < 48; ++m) *w++ = int8_t(ternary_digit(uint8_t(x.qs[m] * kPow3[n3])));
  for (int n3 = 0; n3 < 4; ++n3)
    for (int j = 0; j < 4; ++j) *w++ = int8_t(ternary_digit(uint8_t(x.qh[j] * kPow3[n3])));
}

void tq2_0_digits(const BlockTq2_0& x, int8_t* w) {
  for (int j = 0; j < 64; j += 32)
    for (int l = 0; l < 4; ++l)
      for (int m = 0; m < 32; ++m) *w++ = int8_t((x.qs[j + m] >> (2 * l)) & 3);
}

// llama.cpp's IQ panel GEMM (ggml-cpu/iqp.cpp of the reference build, see scalar_iq.h): per
// super-block one exact integer, the sum of scale * weight * activation over its 256 values, then
// acc = fma(float(sum), dfac * y.d, acc) with dfac = x.d times the type's power of two. Any exact
// way of forming the integer gives the panel's float, so only the float steps follow ggml.
int32_t panel_sum(const Decoded& b, const int8_t* q8) {
  int32_t sum = 0;
  for (int p = 0; p < kQK_K; ++p) sum += int32_t(b.scale[p / 16]) * b.w[p] * q8[p];
  return sum;
}

template <class Block>
float panel_dot(const void* w, const void* act, int64_t n, float dfac_factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc = 0.0f;
  Decoded b;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(x[i], b);
    const float dfac = fp16_to_f32(x[i].d) * dfac_factor;
    acc = std::fma(float(panel_sum(b, y[i].qs)), dfac * y[i].d, acc);
  }
  return acc;
}

}  // namespace

float vec_dot_tq1_0(const void* w, const void* act, int64_t n) {
  return ternary_dot<BlockTq1_0>(w, act, n, tq1_0_digits);
}
float vec_dot_tq2_0(const void* w, const void* act, int64_t n) {
  return ternary_dot<BlockTq2_0>(w, act, n, tq2_0_digits);
}
float vec_dot_iq2_xxs(const void* w, const void* act, int64_t n) { return grid_dot<BlockIq2Xxs>(w, act, n, 0.125f); }
float vec_dot_iq2_xs(const void* w, const void* act, int64_t n) { return grid_dot<BlockIq2Xs>(w, act, n, 0.125f); }
float vec_dot_iq2_s(const void* w, const void* act, int64_t n) { return grid_dot<BlockIq2S>(w, act, n, 0.125f); }
float vec_dot_iq3_xxs(const void* w, const void* act, int64_t n) { return grid_dot<BlockIq3Xxs>(w, act, n, 0.25f); }
float vec_dot_iq3_s(const void* w, const void* act, int64_t n) { return grid_dot<BlockIq3S>(w, act, n, 1.0f); }
float vec_dot_iq4_xs(const void* w, const void* act, int64_t n) { return grid_dot<BlockIq4Xs>(w, act, n, 1.0f); }

// IQ1_S: the delta term is one integer per super-block (bsums times +-scale), accumulated apart
// in a scalar and added at the end with weight 1/8, as ggml does.
float vec_dot_iq1_s(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq1S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[8] = {}, acc_delta = 0.0f;
  Decoded b;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(x[i], b);
    int delta_sum = 0;
    for (int ib = 0; ib < 8; ++ib)
      delta_sum += (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]) * (x[i].qh[ib] & 0x8000 ? -1 : 1) * b.scale[2 * ib];
    const float d = y[i].d * fp16_to_f32(x[i].d);
    fma_lanes(acc, d, lanes_of(b, y[i].qs));
    acc_delta = std::fma(d, float(delta_sum), acc_delta);
  }
  return std::fma(kIq1Delta, acc_delta, hsum8(acc));
}

// IQ1_M: the delta term has its own eight lanes, reduced apart and added with weight 1/8.
float vec_dot_iq1_m(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq1M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[8] = {}, acc_delta[8] = {};
  Decoded b, delta;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(x[i], b, delta);
    const float d = y[i].d * fp16_to_f32(iq1_m_scale_bits(x[i]));
    fma_lanes(acc, d, lanes_of(b, y[i].qs));
    fma_lanes(acc_delta, d, lanes_of(delta, y[i].qs));
  }
  return std::fma(kIq1Delta, hsum8(acc_delta), hsum8(acc));
}


namespace {

// The IQ1 types' panel weights are 8 * grid + delta (delta +-1), with dfac = d / 8.
float panel_dot_iq1(const Decoded& grid, const Decoded& delta, const int8_t* q8, float dfac, float yd, float acc) {
  Decoded v = grid;
  for (int p = 0; p < kQK_K; ++p) v.w[p] = int8_t(8 * grid.w[p] + delta.w[p]);
  return std::fma(float(panel_sum(v, q8)), dfac * yd, acc);
}

}  // namespace

float vec_dot_panel_iq2_xxs(const void* w, const void* act, int64_t n) {
  return panel_dot<BlockIq2Xxs>(w, act, n, 0.125f);
}
float vec_dot_panel_iq2_xs(const void* w, const void* act, int64_t n) { return panel_dot<BlockIq2Xs>(w, act, n, 0.125f); }
float vec_dot_panel_iq2_s(const void* w, const void* act, int64_t n) { return panel_dot<BlockIq2S>(w, act, n, 0.125f); }
float vec_dot_panel_iq3_xxs(const void* w, const void* act, int64_t n) {
  return panel_dot<BlockIq3Xxs>(w, act, n, 0.25f);
}
float vec_dot_panel_iq3_s(const void* w, const void* act, int64_t n) { return panel_dot<BlockIq3S>(w, act, n, 1.0f); }
float vec_dot_panel_iq4_xs(const void* w, const void* act, int64_t n) { return panel_dot<BlockIq4Xs>(w, act, n, 1.0f); }

float vec_dot_panel_iq1_s(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq1S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc = 0.0f;
  Decoded b, delta;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(x[i], b);
    for (int p = 0; p < kQK_K; ++p) delta.w[p] = int8_t(x[i].qh[p / 32] & 0x8000 ? -1 : 1);
    acc = panel_dot_iq1(b, delta, y[i].qs, fp16_to_f32(x[i].d) * 0.125f, y[i].d, acc);
  }
  return acc;
}

float vec_dot_panel_iq1_m(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIq1M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc = 0.0f;
  Decoded b, delta;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(x[i], b, delta);
    acc = panel_dot_iq1(b, delta, y[i].qs, fp16_to_f32(iq1_m_scale_bits(x[i])) * 0.125f, y[i].d, acc);
  }
  return acc;
}

}  // namespace sluice::kernels::cpu
