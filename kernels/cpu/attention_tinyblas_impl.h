// Bodies of the tinyBLAS-order attention products on an F16 KV cache (dispatch.h:
// dot_f16_rows_tinyblas, fma_f16_lanes), compiled plain (attention_tinyblas.cpp, the scalar level)
// and with -mavx2 -mfma -mf16c (attention_tinyblas_avx2.cpp): std::fma is exactly rounded in both,
// so both give the same bits. The including file defines widen_f16(src, dst, m) and widen_one(h)
// (exact). Values go
// in chunks of kTbChunk, the 16 lane accumulators carried across chunks, so any length takes the
// same order. Include inside a namespace after <algorithm>, <cmath>, cpu/dispatch.h (kTbVtCells)
// and cpu/expf_ggml.h.

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

// The plain GEMM over a transposed group (the including file may define TB_OWN_LANES_GEMM and its
// own lanes_gemm with the same sums): 2 channels x 2 outputs of 16-lane accumulators per pass.
#ifndef TB_OWN_LANES_GEMM
void lanes_gemm(const float* vt, const float* w_vec, int64_t kChunks, int64_t n_chunks, int64_t n, int n_out,
                float* const* lanes) {
  auto vt_at = [&](int64_t ch, int64_t k) { return vt + static_cast<size_t>((ch * kChunks + k) * 16); };
  auto w_at = [&](int64_t g, int64_t k) { return w_vec + static_cast<size_t>((g * kChunks + k) * 16); };
  int64_t ch = 0;
  for (; ch + 2 <= n; ch += 2) {
    int g = 0;
    for (; g + 2 <= n_out; g += 2) {
      float acc[2][2][16];
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
          for (int l = 0; l < 16; ++l) acc[a][b][l] = lanes[g + b][(ch + a) * 16 + l];
      for (int64_t k = 0; k < n_chunks; ++k)
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b)
            for (int l = 0; l < 16; ++l) acc[a][b][l] = std::fma(vt_at(ch + a, k)[l], w_at(g + b, k)[l], acc[a][b][l]);
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
          for (int l = 0; l < 16; ++l) lanes[g + b][(ch + a) * 16 + l] = acc[a][b][l];
    }
    for (; g < n_out; ++g)
      for (int a = 0; a < 2; ++a) {
        float* acc = lanes[g] + (ch + a) * 16;
        for (int64_t k = 0; k < n_chunks; ++k)
          for (int l = 0; l < 16; ++l) acc[l] = std::fma(vt_at(ch + a, k)[l], w_at(g, k)[l], acc[l]);
      }
  }
  for (; ch < n; ++ch)
    for (int g = 0; g < n_out; ++g) {
      float* acc = lanes[g] + ch * 16;
      for (int64_t k = 0; k < n_chunks; ++k)
        for (int l = 0; l < 16; ++l) acc[l] = std::fma(vt_at(ch, k)[l], w_at(g, k)[l], acc[l]);
    }
}
#endif

// A chunk's 16 cells (src[l]: cell l's F16 row, or null for a cell outside the call: zeros) into
// vt[i * vt_stride + l] for every channel i < n. The including file may define TB_OWN_TRANSPOSE
// and its own transpose_chunk with the same values.
#ifndef TB_OWN_TRANSPOSE
void transpose_chunk(const uint16_t* const* src, int64_t n, float* vt, int64_t vt_stride) {
  for (int64_t i = 0; i < n; ++i) {
    float* d = vt + i * vt_stride;
    for (int l = 0; l < 16; ++l) d[l] = src[l] ? widen_one(src[l][i]) : 0.0f;
  }
}
#endif

// V^T kq as the SIMD level does it (attention_tinyblas_avx512.cpp): a group of kTbVtCells cells
// widened and transposed into vt[channel][chunk][16 cells] (zeros outside the call's cells, whose
// weights are zeros too: fma(0, 0, acc) leaves acc as it is), then 2 channels x 2 outputs of
// 16-lane accumulators per pass over the group's chunks.
void fma_f16_lanes(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n,
                   const float* const* weight, float* const* lanes, int n_out, float* scratch) {
  const int64_t kChunks = tinyblas_group_chunks(first_cell, n_rows);
  const int64_t end = first_cell + n_rows;
  const int64_t n16 = (n + 15) / 16 * 16;
  float* w_vec = scratch + static_cast<size_t>(n16 * kChunks * 16);
  auto vt_at = [&](int64_t ch, int64_t k) { return scratch + static_cast<size_t>((ch * kChunks + k) * 16); };
  auto w_at = [&](int64_t g, int64_t k) { return w_vec + static_cast<size_t>((g * kChunks + k) * 16); };
  for (int64_t g0 = first_cell - first_cell % 16; g0 < end; g0 += kTbVtCells) {
    const int64_t n_chunks = std::min(kChunks, (end - g0 + 15) / 16);
    for (int64_t k = 0; k < n_chunks; ++k) {
      // A chunk's 16 cells, channel by channel: each channel's 16 values are one contiguous store.
      const uint16_t* src[16];
      for (int l = 0; l < 16; ++l) {
        const int64_t c = g0 + 16 * k + l;
        src[l] = c >= first_cell && c < end
                     ? reinterpret_cast<const uint16_t*>(rows + static_cast<size_t>(c - first_cell) * row_stride)
                     : nullptr;
        for (int g = 0; g < n_out; ++g) w_at(g, k)[l] = src[l] ? weight[g][c - first_cell] : 0.0f;
      }
      transpose_chunk(src, n, vt_at(0, k), kChunks * 16);
    }
    lanes_gemm(scratch, w_vec, kChunks, n_chunks, n, n_out, lanes);
  }
}
