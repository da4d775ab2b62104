// Least-squares fitting helpers for the reference weight quantizers.
//
// Each helper searches a small set of candidate scales around the obvious one (amax / levels),
// quantizes with each, refits the scale (and offset) by least squares for that assignment and
// keeps the candidate with the smallest squared error. This is the idea behind ggml's
// make_qx_quants / make_qkx2_quants, written for plain (unweighted) error.
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

// x ~= scale * q with q in [qmin, qmax] (qmin < 0 < qmax). Writes q; returns the scale
// (0 when x is all zero, q then all 0).
float fit_symmetric(const float* x, int n, int qmin, int qmax, int8_t* q);

// x ~= scale * q - offset with q in [0, qmax] and offset >= 0 (the k-quants' "min" form, which
// ggml requires to include zero), or any offset when `any_offset` (Q4_1/Q5_1). Writes q.
void fit_affine(const float* x, int n, int qmax, bool any_offset, uint8_t* q, float* scale, float* offset);

// Round half to even (ggml's nearest_int), for |v| < 2^22.
int nearest_int(float v);

// Nearest of `n_values` sorted code points to v; returns the index.
int nearest_code(const int8_t* values, int n_values, float v);

}  // namespace sluice::kernels::cpu
