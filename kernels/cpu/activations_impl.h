// The 16-value blocks of silu and swiglu through the scalar emulation of ggml_v_expf, compiled
// twice: plainly (activations.cpp, the scalar table) and with -mavx2 -mfma (activations_avx2.cpp,
// the avx2 table), where each std::fma is one instruction instead of a libm call. std::fma is
// exact either way and nothing here is a contractible a * b + c, so both copies give the same
// bits. Include inside a namespace; needs <cstddef> and cpu/expf_ggml.h.
inline void silu_blocks_impl(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + detail::ggml_v_expf(0.0f - x[i]));
}

inline void swiglu_blocks_impl(const float* gate, const float* up, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + detail::ggml_v_expf(0.0f - g)) * up[i];
  }
}
