// Scalar dot products of the k-quants with Q8_K activations.
// Per super-block the weighted integer sum is exact; it is scaled once by d (and the min term by
// dmin using Q8_K's bsums), then accumulated in f32 as ggml does.
#include <cmath>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

float vec_dot_q2_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
    int isum = 0, is = 0;
    const int8_t* q8 = y[i].qs;
    const uint8_t* q2 = x[i].qs;
    for (int half = 0; half < 2; ++half, q2 += 32) {
      for (int shift = 0; shift < 8; shift += 2, q8 += 32) {
        for (int part = 0; part < 2; ++part) {
          int s = 0;
          for (int l = 16 * part; l < 16 * part + 16; ++l) s += q8[l] * ((q2[l] >> shift) & 3);
          isum += (x[i].scales[is++] & 0xF) * s;
        }
      }
    }
    const float dall = y[i].d * fp16_to_f32(x[i].d);
    const float dmin = y[i].d * fp16_to_f32(x[i].dmin);
    sum += dall * float(isum) - dmin * float(summs);
  }
  return sum;
}

float vec_dot_q3_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t scales[16];
    unpack_q3_k_scales(x[i].scales, scales);
    int isum = 0, is = 0;
    const int8_t* q8 = y[i].qs;
    const uint8_t* q3 = x[i].qs;
    uint8_t m = 1;
    for (int half = 0; half < 2; ++half, q3 += 32) {
      for (int shift = 0; shift < 8; shift += 2, q8 += 32, m = uint8_t(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          int s = 0;
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q3[l] >> shift) & 3) - ((x[i].hmask[l] & m) ? 0 : 4);
            s += q8[l] * v;
          }
          isum += scales[is++] * s;
        }
      }
    }
    sum += (fp16_to_f32(x[i].d) * y[i].d) * float(isum);
  }
  return sum;
}

float vec_dot_q4_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0, summs = 0;
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    for (int j = 0; j < 8; j += 2, q4 += 32, q8 += 64) {
      uint8_t sc0, m0, sc1, m1;
      scale_min_k4(j, x[i].scales, &sc0, &m0);
      scale_min_k4(j + 1, x[i].scales, &sc1, &m1);
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += (q4[l] & 0xF) * q8[l];
        s1 += (q4[l] >> 4) * q8[l + 32];
      }
      isum += sc0 * s0 + sc1 * s1;
      summs += m0 * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]) +
               m1 * (y[i].bsums[2 * j + 2] + y[i].bsums[2 * j + 3]);
    }
    const float d = y[i].d * fp16_to_f32(x[i].d);
    const float dmin = y[i].d * fp16_to_f32(x[i].dmin);
    sum += d * float(isum) - dmin * float(summs);
  }
  return sum;
}

namespace {

// llama.cpp's x86 CPU backend repacks Q4_K matrices (REPACK: 8 rows interleaved, block_q4_Kx8) and
// multiplies them with its own GEMV/GEMM, which sum in another order than vec_dot: the weighted
// integer sum and the min sum (both exact) of a group of sub-blocks are turned into floats, and
// each is accumulated by one fma into its own accumulator; the min accumulator is subtracted once
// at the end. The GEMV's group is a whole super-block (8 sub-blocks), the 4-row GEMM's a pair.
template <int kGroup>
float q4_k_repack_order(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d) * y[i].d;
    const float dmin = fp16_to_f32(x[i].dmin) * y[i].d;
    for (int g = 0; g < 8; g += kGroup) {
      int isum = 0, summs = 0;
      for (int j = g; j < g + kGroup; ++j) {
        uint8_t sc, m;
        scale_min_k4(j, x[i].scales, &sc, &m);
        const uint8_t* q4 = x[i].qs + 32 * (j / 2);
        const int8_t* q8 = y[i].qs + 32 * j;
        int s = 0;
        for (int l = 0; l < 32; ++l) s += ((j % 2 == 0) ? (q4[l] & 0xF) : (q4[l] >> 4)) * q8[l];
        isum += sc * s;
        summs += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
      }
      acc = std::fma(float(isum), d, acc);
      acc_min = std::fma(float(summs), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

}  // namespace

namespace {

// llama.cpp repacks Q2_K matrices on AVX-512 CPUs (block_q2_Kx8, the reference build's CPU) and
// sums them like Q4_K's repacked kernels: the exact weighted integer sum and min sum of a group
// of 16-value sub-blocks each go into one float by one fma into their own accumulator, and the
// min accumulator is subtracted once at the end. The GEMV's group is the whole super-block (16
// sub-blocks), the 4-row GEMM's a half (8 sub-blocks, 128 values).
template <int kGroup>
float q2_k_repack_order(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d) * y[i].d;
    const float dmin = fp16_to_f32(x[i].dmin) * y[i].d;
    for (int g = 0; g < 16; g += kGroup) {
      int isum = 0, summs = 0;
      for (int j = g; j < g + kGroup; ++j) {
        // Sub-block j: values 16j .. 16j+15, bits 2*((j / 2) % 4) of qs[32 * (j / 8) + 16 * (j % 2) + l].
        const uint8_t* q2 = x[i].qs + 32 * (j / 8) + 16 * (j % 2);
        const int shift = 2 * ((j / 2) % 4);
        const int8_t* q8 = y[i].qs + 16 * j;
        int s = 0;
        for (int l = 0; l < 16; ++l) s += ((q2[l] >> shift) & 3) * q8[l];
        isum += (x[i].scales[j] & 0xF) * s;
        summs += (x[i].scales[j] >> 4) * y[i].bsums[j];
      }
      acc = std::fma(float(isum), d, acc);
      acc_min = std::fma(float(summs), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

}  // namespace

float vec_dot_q2_k_repack(const void* w, const void* act, int64_t n) { return q2_k_repack_order<16>(w, act, n); }
float vec_dot_q2_k_repack_gemm(const void* w, const void* act, int64_t n) {
  return q2_k_repack_order<8>(w, act, n);
}

float vec_dot_q4_k_repack(const void* w, const void* act, int64_t n) { return q4_k_repack_order<8>(w, act, n); }
float vec_dot_q4_k_repack_gemm(const void* w, const void* act, int64_t n) {
  return q4_k_repack_order<2>(w, act, n);
}

float vec_dot_q5_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0, summs = 0;
    const uint8_t* ql = x[i].qs;
    const int8_t* q8 = y[i].qs;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2, ql += 32, q8 += 64, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2)) {
      uint8_t sc0, m0, sc1, m1;
      scale_min_k4(j, x[i].scales, &sc0, &m0);
      scale_min_k4(j + 1, x[i].scales, &sc1, &m1);
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += ((ql[l] & 0xF) + (x[i].qh[l] & u1 ? 16 : 0)) * q8[l];
        s1 += ((ql[l] >> 4) + (x[i].qh[l] & u2 ? 16 : 0)) * q8[l + 32];
      }
      isum += sc0 * s0 + sc1 * s1;
      summs += m0 * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]) +
               m1 * (y[i].bsums[2 * j + 2] + y[i].bsums[2 * j + 3]);
    }
    const float d = y[i].d * fp16_to_f32(x[i].d);
    const float dmin = y[i].d * fp16_to_f32(x[i].dmin);
    sum += d * float(isum) - dmin * float(summs);
  }
  return sum;
}

float vec_dot_q6_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    const int8_t* q8 = y[i].qs;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, q8 += 128) {
      int s[8] = {};
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        s[g + 0] += (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32) * q8[l];
        s[g + 2] += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * q8[l + 32];
        s[g + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * q8[l + 64];
        s[g + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * q8[l + 96];
      }
      for (int g = 0; g < 8; ++g) isum += sc[g] * s[g];
    }
    sum += (fp16_to_f32(x[i].d) * y[i].d) * float(isum);
  }
  return sum;
}

}  // namespace sluice::kernels::cpu
