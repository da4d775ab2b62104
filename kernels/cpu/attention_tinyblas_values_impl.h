// The body of fma_f16_lanes (dispatch.h: V^T kq on an F16 KV cache in tinyBLAS's order), one for
// every level: a group of up to kTbVtCells cells is widened and transposed into
// vt[channel][chunk][16 cells] and the weights into w[output][chunk][16 cells] (zeros outside the
// call's cells: fma(0, 0, acc) leaves acc as it is), then a GEMM runs over the group's chunks. The
// including file may define TB_OWN_TRANSPOSE / TB_OWN_LANES_GEMM and its own transpose_chunk /
// lanes_gemm (the SIMD levels), which must give the plain ones' values; the plain transpose needs
// widen_one(h) (exact). Include inside a namespace after <algorithm>, <cmath> and cpu/dispatch.h.

// The GEMM over a transposed group: lanes[g][ch * 16 + l] += vt(ch, k)[l] * w(g, k)[l] over the
// chunks k in order (one fma each), here 2 channels x 2 outputs of 16-lane accumulators per pass.
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
// vt[i * vt_stride + l] for every channel i < n (a SIMD transpose may also fill the channels up to
// n rounded up to 16: the scratch holds them).
#ifndef TB_OWN_TRANSPOSE
void transpose_chunk(const uint16_t* const* src, int64_t n, float* vt, int64_t vt_stride) {
  for (int64_t i = 0; i < n; ++i) {
    float* d = vt + i * vt_stride;
    for (int l = 0; l < 16; ++l) d[l] = src[l] ? widen_one(src[l][i]) : 0.0f;
  }
}
#endif

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
      const int64_t base = g0 + 16 * k;
      const uint16_t* src[16];
      for (int l = 0; l < 16; ++l) {
        const int64_t c = base + l;
        src[l] = c >= first_cell && c < end
                     ? reinterpret_cast<const uint16_t*>(rows + static_cast<size_t>(c - first_cell) * row_stride)
                     : nullptr;
      }
      const bool whole = base >= first_cell && base + 16 <= end;  // every chunk but a call's ends
      for (int g = 0; g < n_out; ++g) {
        float* w = w_at(g, k);
        if (whole)
          std::copy_n(weight[g] + (base - first_cell), 16, w);
        else
          for (int l = 0; l < 16; ++l) w[l] = src[l] ? weight[g][base + l - first_cell] : 0.0f;
      }
      transpose_chunk(src, n, vt_at(0, k), kChunks * 16);
    }
    lanes_gemm(scratch, w_vec, kChunks, n_chunks, n, n_out, lanes);
  }
}
