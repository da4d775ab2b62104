// rope: rotary position embedding, ggml's ggml_rope_ext (modes NORM and NEOX, with YaRN).
//
// A head of `head_dim` values has its first `n_dims` values rotated; the rest pass through.
// Pairing:
//   NORM (llama, deepseek2): pairs (2i, 2i+1)
//   NEOX (qwen, gpt-neox):   pairs (i, i + n_dims/2)
// Pair i (i in [0, n_dims/2)) turns by theta_i = pos * freq_base^(-2i/n_dims), computed as ggml
// does: theta starts at (float)pos and is multiplied by theta_scale = powf(freq_base,
// -2/n_dims) once per pair, in float. With YaRN (ext_factor != 0) theta is blended between the
// interpolated (freq_scale * theta) and the extrapolated value by a ramp over the correction
// dims, and the magnitude gets mscale = attn_factor * (1 + 0.1 * ln(1 / freq_scale)); without
// YaRN mscale = attn_factor. These are ggml's rope_yarn / ggml_rope_yarn_corr_dims, line for line.
//
// Use: rope_cache() once per position fills cos/sin pairs [n_dims] (caller-owned), then
// rope_apply() rotates any number of heads at that position in place.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

enum class RopeMode { norm, neox };

struct RopeParams {
  RopeMode mode = RopeMode::norm;
  int n_dims = 0;           // rotated dims per head (ggml n_rot), even
  int n_ctx_orig = 0;       // YaRN original context (ggml n_ctx_orig_yarn)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / rope scaling factor
  float ext_factor = 0.0f;  // YaRN extrapolation mix; 0 disables YaRN
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

// ggml_rope_yarn_corr_dims: [start, end] dims of the YaRN ramp.
void rope_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast,
                         float beta_slow, float dims[2]);

// cache[2i] = cos(theta_i) * mscale, cache[2i+1] = sin(theta_i) * mscale, for i < n_dims/2.
// cache.size() >= n_dims.
void rope_cache(const RopeParams& p, int64_t pos, std::span<float> cache);

// Rotates n_heads heads of head_dim values each, laid out back to back with `head_stride`
// floats between head starts, in place.
void rope_apply(const RopeParams& p, std::span<const float> cache, float* x, int64_t n_heads,
                int64_t head_stride);

}  // namespace sluice::kernels
