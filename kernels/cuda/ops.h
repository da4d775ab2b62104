// The CUDA ops, with the same meaning as the CPU layer's (kernels/*.h). All pointers are device
// pointers; every op is enqueued on `stream` and returns without waiting. Layouts are the CPU
// layer's (row-major, ggml block layouts for quantized weights). Shapes that the kernels do not
// support throw sluice::Error before launching anything.
//
// Numerics differ from the CPU layer in summation order (and quantized matvec dots the weights
// against f32 activations instead of quantizing the activations), so results are compared with
// a tolerance on normalized MSE, stated per op in tests/test_cuda_*.cpp.
#pragma once

#include <cstdint>

#include "common/ggml_type.h"
#include "kernels/cuda/runtime.h"
#include "kernels/rope.h"

namespace sluice::kernels::cuda {

// A weight matrix in device memory: n_rows rows of n_cols values, row_stride bytes apart.
struct DeviceMatrix {
  GgmlType type = GgmlType::F32;
  const std::byte* data = nullptr;
  int64_t n_cols = 0;
  int64_t n_rows = 0;
  size_t row_stride = 0;
};

// Types with CUDA matvec/matmul kernels: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, MXFP4, IQ4_NL (every type kernels::is_supported accepts).
// Weights need their fields' alignment (2 bytes for every block type but MXFP4, 4 for F32) in
// both `data` and `row_stride`; x and y 4 bytes (16-byte aligned x is read with vector loads).
bool is_supported(GgmlType type);

// y[n_rows] = W x[n_cols]
void matvec(const DeviceMatrix& w, const float* x, float* y, Stream& stream);
// Y[t][n_rows] = W X[t][n_cols], t < n_tokens, row-major.
void matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, Stream& stream);

// y = x / sqrt(mean(x^2) + eps) * weight per row of n; weight may be null. x and y may alias.
void rms_norm(const float* x, const float* weight, float eps, int64_t n, int64_t n_rows, float* y,
              Stream& stream);

// Rotates n_heads heads (head_stride floats apart) of each of n_tokens rows (row_stride floats
// apart) in place; token t is at position positions[t] (device array).
void rope(const RopeParams& p, float* x, int64_t n_tokens, int64_t row_stride, int64_t n_heads,
          int64_t head_stride, const int32_t* positions, Stream& stream);

// Causal attention of n_tokens queries at positions start_pos .. start_pos + n_tokens - 1 over
// caches holding positions 0 .. start_pos + n_tokens - 1. Query head h uses KV head
// h / (n_head / n_head_kv) (GQA). Element addresses, in floats:
//   q[t, h, i]   = q + t * q_stride + h * q_head_stride + i            (i < k_len)
//   k[p, g, i]   = k_cache + p * k_row_stride + g * k_head_stride + i   (i < k_len)
//   v[p, g, i]   = v_cache + p * v_row_stride + g * v_head_stride + i   (i < v_len)
//   out[t, h, i] = out + t * out_stride + h * out_head_stride + i       (i < v_len)
// out = softmax(scale * q.k over p <= start_pos + t) . v
// Absorbed MLA is n_head_kv = 1, k rows [rope | latent] and v_cache = k_cache + rope with
// v_row_stride = k_row_stride: the latent part of each key row doubles as its value.
// Limits: k_len <= 8192, v_len <= 640, n_tokens <= 65535 per call.
struct AttentionShape {
  int64_t n_head = 0, n_head_kv = 0;
  int64_t k_len = 0, v_len = 0;           // per head
  int64_t q_stride = 0, q_head_stride = 0;  // floats
  int64_t k_row_stride = 0, v_row_stride = 0;  // floats between positions in the caches
  int64_t k_head_stride = 0, v_head_stride = 0;
  int64_t out_stride = 0, out_head_stride = 0;
  float scale = 1.0f;
};
void attention(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_tokens, int64_t start_pos, float* out, Stream& stream);

// Router: probs = softmax(logits) or sigmoid(logits); selection = probs + bias (bias may be null);
// ids = top-k of selection (ties to the lower id), weights = probs[ids], normalized when `norm`
// (sum clamped at 6.103515625e-5) then multiplied by `scale`. One token per row; n_expert <= 1024,
// k <= 64. ids and weights are [n_tokens][k].
enum class Gating { softmax, sigmoid };
void route(const float* logits, const float* bias, int64_t n_tokens, int64_t n_expert, int64_t k,
           Gating gating, bool norm, float scale, int32_t* ids, float* weights, Stream& stream);

// y = silu(gate) * up, element-wise over n values (y may alias gate).
void swiglu(const float* gate, const float* up, int64_t n, float* y, Stream& stream);

}  // namespace sluice::kernels::cuda
