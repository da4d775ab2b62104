// Bodies of the tinyBLAS-order attention products on an F16 KV cache (dispatch.h:
// dot_f16_rows_tinyblas, fma_f16_lanes), compiled plain (attention_tinyblas.cpp, the scalar level)
// and with -mavx2 -mfma -mf16c (attention_tinyblas_avx2.cpp): std::fma is exactly rounded in both,
// so both give the same bits. The including file defines widen_f16(src, dst, m) (exact). Values go
// in chunks of kTbChunk, the 16 lane accumulators carried across chunks, so any length takes the
// same order. Include inside a namespace after <algorithm>, <cmath> and cpu/expf_ggml.h.

constexpr int64_t kTbChunk = 1024;
constexpr int kTbMaxQ = 8;

void dot_f16_rows_tinyblas(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                           int n_q, float* const* out) {
  for (int q0 = 0; q0 < n_q; q0 += kTbMaxQ) {
    const int nq = std::min(kTbMaxQ, n_q - q0);
    for (int64_t j = 0; j < n_rows; ++j) {
      const auto* row = reinterpret_cast<const uint16_t*>(rows + static_cast<size_t>(j) * row_stride);
      float acc[kTbMaxQ][16] = {};
      for (int64_t c0 = 0; c0 < n; c0 += kTbChunk) {
        const int64_t m = std::min(kTbChunk, n - c0);
        alignas(64) float x[kTbChunk];
        alignas(64) float y[kTbChunk];
        widen_f16(row + c0, x, m);
        for (int h = 0; h < nq; ++h) {
          widen_f16(q[q0 + h] + c0, y, m);
          for (int64_t l = 0; l < m; l += 16)
            for (int r = 0; r < 16; ++r) acc[h][r] = std::fma(x[l + r], y[l + r], acc[h][r]);
        }
      }
      for (int h = 0; h < nq; ++h) out[q0 + h][j] = ::sluice::kernels::detail::reduce_add_16(acc[h]);
    }
  }
}

void fma_f16_lanes(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n,
                   const float* const* weight, float* const* lanes, int n_out) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const auto* row = reinterpret_cast<const uint16_t*>(rows + static_cast<size_t>(j) * row_stride);
    const size_t lane = static_cast<size_t>((first_cell + j) % 16) * static_cast<size_t>(n);
    for (int64_t c0 = 0; c0 < n; c0 += kTbChunk) {
      const int64_t m = std::min(kTbChunk, n - c0);
      alignas(64) float v[kTbChunk];
      widen_f16(row + c0, v, m);
      for (int g = 0; g < n_out; ++g) {
        const float w = weight[g][j];
        float* acc = lanes[g] + lane + static_cast<size_t>(c0);
        for (int64_t i = 0; i < m; ++i) acc[i] = std::fma(v[i], w, acc[i]);
      }
    }
  }
}
