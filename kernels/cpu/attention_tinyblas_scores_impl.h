// The body of dot_f16_rows_tinyblas (dispatch.h: attention scores on an F16 KV cache in tinyBLAS's
// order), compiled plain (attention_tinyblas.cpp, the scalar level) and with -mavx2 -mfma -mf16c
// (attention_tinyblas_avx2.cpp): std::fma is exactly rounded in both, so both give the same bits.
// The including file defines widen_f16(src, dst, m) (exact). Values go in chunks of kTbChunk, the
// 16 lane accumulators carried across chunks, so any length takes the same order. Include inside a
// namespace after <algorithm>, <cmath> and cpu/expf_ggml.h.

constexpr int64_t kTbChunk = 1024;
constexpr int kTbMaxQ = 8;

void dot_f16_rows_tinyblas(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                           int n_q, float* const* out) {
  for (int q0 = 0; q0 < n_q; q0 += kTbMaxQ) {
    const int nq = std::min(kTbMaxQ, n_q - q0);
    // Rows up to kTbChunk long widen q once for every key row (exact either way).
    alignas(64) float qf[kTbMaxQ][kTbChunk];
    const bool q_once = n <= kTbChunk;
    if (q_once)
      for (int h = 0; h < nq; ++h) widen_f16(q[q0 + h], qf[h], n);
    for (int64_t j = 0; j < n_rows; ++j) {
      const auto* row = reinterpret_cast<const uint16_t*>(rows + static_cast<size_t>(j) * row_stride);
      float acc[kTbMaxQ][16] = {};
      for (int64_t c0 = 0; c0 < n; c0 += kTbChunk) {
        const int64_t m = std::min(kTbChunk, n - c0);
        alignas(64) float x[kTbChunk];
        widen_f16(row + c0, x, m);
        for (int h = 0; h < nq; ++h) {
          const float* y = qf[h];
          alignas(64) float y_chunk[kTbChunk];
          if (!q_once) {
            widen_f16(q[q0 + h] + c0, y_chunk, m);
            y = y_chunk;
          }
          for (int64_t l = 0; l < m; l += 16)
            for (int r = 0; r < 16; ++r) acc[h][r] = std::fma(x[l + r], y[l + r], acc[h][r]);
        }
      }
      for (int h = 0; h < nq; ++h) out[q0 + h][j] = ::sluice::kernels::detail::reduce_add_16(acc[h]);
    }
  }
}
