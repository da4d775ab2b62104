// The body of kernels::softmax, compiled twice: plainly (softmax.cpp) and with -mavx2 -mfma
// (softmax_avx2.cpp), where each std::fma of ggml_v_expf is one instruction instead of a libm
// call. std::fma is exact either way and nothing here is a contractible a * b + c, so both
// copies give the same bits. Include inside a namespace; needs <cmath>, <limits>, <span> and
// cpu/expf_ggml.h.
inline void softmax_impl(std::span<float> x, float scale) {
  if (x.empty()) return;
  if (scale != 1.0f) {
    for (float& v : x) v *= scale;
  }
  float max = -std::numeric_limits<float>::infinity();
  for (float v : x) max = v > max ? v : max;
  // ggml_vec_soft_max_f32 (AVX-512): 16-lane blocks through ggml_v_expf, each block summed by
  // _mm512_reduce_add_ps and added in double; the tail through libm expf.
  double sum = 0.0;
  const size_t n_simd = x.size() / 16 * 16;
  size_t i = 0;
  for (; i < n_simd; i += 16) {
    for (size_t k = 0; k < 16; ++k) x[i + k] = detail::ggml_v_expf(x[i + k] - max);
    sum += static_cast<double>(detail::reduce_add_16(&x[i]));
  }
  for (; i < x.size(); ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

