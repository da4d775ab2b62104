// Least-squares fitting helpers for the reference weight quantizers (see fit.h).
#include "kernels/cpu/fit.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sluice::kernels::cpu {

int nearest_int(float v) {
  const float t = v + 12582912.0f;
  return int(std::bit_cast<int32_t>(t) & 0x007fffff) - 0x00400000;
}

int nearest_code(const int8_t* values, int n_values, float v) {
  int best = 0;
  float best_d = std::fabs(v - float(values[0]));
  for (int i = 1; i < n_values; ++i) {
    const float d = std::fabs(v - float(values[i]));
    if (d < best_d) {
      best_d = d;
      best = i;
    }
  }
  return best;
}

float fit_symmetric(const float* x, int n, int qmin, int qmax, int8_t* q) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-30f) {
    std::fill(q, q + n, int8_t(0));
    return 0.0f;
  }
  int8_t trial[256];
  double best_gain = -1.0;
  float best_scale = 0.0f;
  // Map the extreme value to either end of the range (the negative end has one more level),
  // nudged by fractions of a level, and keep the best least-squares refit.
  for (int side = 0; side < 2; ++side) {
    const float levels = side == 0 ? float(-qmin) : float(qmax);
    const float sign = side == 0 ? -1.0f : 1.0f;
    for (int step = -10; step <= 10; ++step) {
      const float iscale = sign * (levels + 0.1f * float(step)) / max;
      double sum_xq = 0.0, sum_qq = 0.0;
      for (int i = 0; i < n; ++i) {
        const int v = std::clamp(nearest_int(iscale * x[i]), qmin, qmax);
        trial[i] = int8_t(v);
        sum_xq += double(x[i]) * v;
        sum_qq += double(v) * v;
      }
      if (sum_qq <= 0.0) continue;
      // Error = sum x^2 - sum_xq^2 / sum_qq, so maximise the second term.
      const double gain = sum_xq * sum_xq / sum_qq;
      if (gain > best_gain) {
        best_gain = gain;
        best_scale = float(sum_xq / sum_qq);
        std::copy(trial, trial + n, q);
      }
    }
  }
  return best_scale;
}

void fit_affine(const float* x, int n, int qmax, bool any_offset, uint8_t* q, float* scale, float* offset) {
  float min = x[0], max = x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
  }
  if (!any_offset && min > 0.0f) min = 0.0f;
  if (max <= min) {
    std::fill(q, q + n, uint8_t(0));
    *scale = 0.0f;
    *offset = -min;
    return;
  }
  uint8_t trial[256];
  double best_err = -1.0;
  for (int step = -10; step <= 10; ++step) {
    const float iscale = (float(qmax) + 0.1f * float(step)) / (max - min);
    double sq = 0, sqq = 0, sx = 0, sxq = 0;
    for (int i = 0; i < n; ++i) {
      const int v = std::clamp(nearest_int(iscale * (x[i] - min)), 0, qmax);
      trial[i] = uint8_t(v);
      sq += v;
      sqq += double(v) * v;
      sx += x[i];
      sxq += double(x[i]) * v;
    }
    // Least squares for x ~= s*q + b, with b clamped to <= 0 unless any offset is allowed.
    const double det = double(n) * sqq - sq * sq;
    double s = 0, b = 0;
    if (det > 1e-9 * double(n) * sqq) {
      s = (double(n) * sxq - sq * sx) / det;
      b = (sqq * sx - sq * sxq) / det;
    } else if (any_offset) {
      b = sx / double(n);  // every q equal (a constant block): the offset carries it all
    } else {
      s = sqq > 0 ? sxq / sqq : 0;
    }
    if (!any_offset && b > 0) {
      b = 0;
      s = sqq > 0 ? sxq / sqq : 0;
    }
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * trial[i] + b - x[i];
      err += e * e;
    }
    if (best_err < 0 || err < best_err) {
      best_err = err;
      *scale = float(s);
      *offset = float(-b);
      std::copy(trial, trial + n, q);
    }
  }
}

}  // namespace sluice::kernels::cpu
