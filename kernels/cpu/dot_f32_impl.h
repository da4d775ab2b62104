// Bodies of kernels/dot_f32.h, compiled twice: plain (cpu/dot_f32.cpp) and with FMA/AVX2 code
// generation (cpu/dot_f32_avx2.cpp), where std::fma becomes one instruction and the 16-lane
// loops vectorize. std::fma is exactly rounded in both, so both give the same bits.
// Include inside a namespace; needs kernels/dot_f32.h, kernels/quant.h and cpu/expf_ggml.h.
float dot_f32_ggml_vec(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 16; ++r) {
        const int64_t k = i + j * 16 + r;
        acc[j][r] = std::fma(x[k], y[k], acc[j][r]);
      }
  for (int r = 0; r < 16; ++r) {
    acc[0][r] += acc[2][r];
    acc[1][r] += acc[3][r];
  }
  for (int r = 0; r < 16; ++r) acc[0][r] += acc[1][r];
  float sum = ::sluice::kernels::detail::reduce_add_16(acc[0]);
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

float dot_f32_tinyblas(const float* x, const float* y, int64_t n) {
  float acc[16] = {};
  for (int64_t l = 0; l < n; l += 16)
    for (int r = 0; r < 16; ++r) acc[r] = std::fma(x[l + r], y[l + r], acc[r]);
  return ::sluice::kernels::detail::reduce_add_16(acc);
}

// Four tinyBLAS dots of one weight row, interleaved: each keeps its own accumulator and order
// (so each result equals dot_f32_tinyblas's), but the four FMA chains run side by side instead of
// one chain waiting on its own latency.
void dot_f32_tinyblas_x4(const float* w, const float* const* x, int64_t n, float* out) {
  float acc[4][16] = {};
  for (int64_t l = 0; l < n; l += 16)
    for (int t = 0; t < 4; ++t)
      for (int r = 0; r < 16; ++r) acc[t][r] = std::fma(w[l + r], x[t][l + r], acc[t][r]);
  for (int t = 0; t < 4; ++t) out[t] = ::sluice::kernels::detail::reduce_add_16(acc[t]);
}

void matmul_f32_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, ThreadPool& pool) {
  const bool tiny = contiguous && n_tokens >= 2 && w.n_cols % 16 == 0;
  pool.parallel_for(w.n_rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = reinterpret_cast<const float*>(w.data + static_cast<size_t>(r) * w.row_stride);
      int64_t t = 0;
      for (; tiny && t + 4 <= n_tokens; t += 4) {
        const float* xt[4] = {x.data() + t * w.n_cols, x.data() + (t + 1) * w.n_cols, x.data() + (t + 2) * w.n_cols,
                              x.data() + (t + 3) * w.n_cols};
        float out[4];
        dot_f32_tinyblas_x4(wr, xt, w.n_cols, out);
        for (int k = 0; k < 4; ++k) y[static_cast<size_t>((t + k) * w.n_rows + r)] = out[k];
      }
      for (; t < n_tokens; ++t) {
        const float* xt = x.data() + t * w.n_cols;
        y[static_cast<size_t>(t * w.n_rows + r)] =
            tiny ? dot_f32_tinyblas(wr, xt, w.n_cols) : dot_f32_ggml_vec(wr, xt, w.n_cols);
      }
    }
  });
}

void matmul_f16_ggml(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
                     bool contiguous, bool batch_keeps_f32, std::span<float> x_scratch, ThreadPool& pool) {
  const bool tiny = contiguous && n_tokens >= 2 && w.n_cols % 16 == 0;
  const size_t n = static_cast<size_t>(n_tokens * w.n_cols);
  // Activations as the kernel sees them (F16 values held in f32, or unrounded).
  std::byte h[2 * 64];
  for (size_t i = 0; i < n; i += 64) {
    const int64_t m = static_cast<int64_t>(std::min<size_t>(64, n - i));
    if (tiny && batch_keeps_f32) {
      std::copy(x.data() + i, x.data() + i + m, x_scratch.data() + i);
    } else {
      quantize_row(GgmlType::F16, x.data() + i, h, m);
      dequantize_row(GgmlType::F16, h, x_scratch.data() + i, m);
    }
  }
  pool.parallel_for(w.n_rows, 16, [&](int64_t r0, int64_t r1) {
    float wr[8192];
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(GgmlType::F16, w.data + static_cast<size_t>(r) * w.row_stride, wr, w.n_cols);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x_scratch.data() + t * w.n_cols;
        y[static_cast<size_t>(t * w.n_rows + r)] =
            tiny ? dot_f32_tinyblas(wr, xt, w.n_cols) : dot_f32_ggml_vec(wr, xt, w.n_cols);
      }
    }
  });
}

