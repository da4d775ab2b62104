// The bodies of the key-block attention kernels (kernels/key_block_attention.h) as plain loops over
// 16 lanes, compiled by the scalar level (key_block_attention.cpp) and the AVX2 level
// (key_block_attention_avx2.cpp, where the lane loops vectorize and std::fma is one instruction).
// Every output is one std::fma chain in index order, so both builds give the same bits. Include
// inside a namespace after <algorithm>, <cmath>, <limits>, cpu/expf_ggml.h and definitions of
//   void widen16(const uint16_t* src, float* dst);   // 16 F16 values, exactly
//   void narrow16(const float* src, uint16_t* dst);  // 16 floats to F16, round to nearest even

inline void decompress_key_blocks_impl(const float* lt, int64_t n_blocks, int64_t n_in, const float* wt,
                                       size_t wt_stride, int64_t d, uint16_t* kt, size_t kt_block_stride) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = lt + size_t(b * n_in) * 16;
    for (int64_t i = 0; i < d; ++i) {
      float acc[16] = {};
      for (int64_t l = 0; l < n_in; ++l) {
        const float w = wt[size_t(l) * wt_stride + size_t(i)];
        for (int c = 0; c < 16; ++c) acc[c] = std::fma(w, x[l * 16 + c], acc[c]);
      }
      narrow16(acc, kt + size_t(b) * kt_block_stride + size_t(i) * 16);
    }
  }
}

inline void decompress_value_rows_impl(const float* lt, int64_t n_cells, int64_t n_in, const float* wt,
                                       size_t wt_stride, int64_t d, uint16_t* v, size_t v_stride) {
  for (int64_t j = 0; j < n_cells; ++j) {
    const float* x = lt + size_t((j / 16) * n_in) * 16 + size_t(j % 16);
    for (int64_t i0 = 0; i0 < d; i0 += 16) {
      float acc[16] = {};
      for (int64_t l = 0; l < n_in; ++l) {
        const float xl = x[l * 16];
        const float* w = wt + size_t(l) * wt_stride + size_t(i0);
        for (int c = 0; c < 16; ++c) acc[c] = std::fma(xl, w[c], acc[c]);
      }
      narrow16(acc, v + size_t(j) * v_stride + size_t(i0));
    }
  }
}

inline void key_block_scores_impl(const uint16_t* kt, size_t kt_block_stride, int64_t n_blocks, int64_t d,
                                  const float* const* q, int n_q, float scale, float* const* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint16_t* k = kt + size_t(b) * kt_block_stride;
    for (int r = 0; r < n_q; ++r) {
      float acc[16] = {};
      for (int64_t i = 0; i < d; ++i) {
        float kf[16];
        widen16(k + size_t(i) * 16, kf);
        const float qi = q[r][i];
        for (int c = 0; c < 16; ++c) acc[c] = std::fma(kf[c], qi, acc[c]);
      }
      for (int c = 0; c < 16; ++c) out[r][b * 16 + c] = scale * acc[c];
    }
  }
}

inline float softmax_chunk_impl(float* s, int64_t n, float* max, float* lanes) {
  float m = *max;
  for (int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  const float alpha = *max == -std::numeric_limits<float>::infinity() ? 0.0f : detail::ggml_v_expf(*max - m);
  for (int c = 0; c < 16; ++c) lanes[c] *= alpha;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = detail::ggml_v_expf(s[j] - m);
    lanes[j % 16] += s[j];
  }
  *max = m;
  return alpha;
}

inline void add_weighted_value_rows_impl(const uint16_t* v, size_t v_stride, int64_t n_cells, int64_t d,
                                         const float* const* w, int n_w, float* const* out) {
  for (int r = 0; r < n_w; ++r) {
    for (int64_t i0 = 0; i0 < d; i0 += 16) {
      float acc[16];
      for (int c = 0; c < 16; ++c) acc[c] = out[r][i0 + c];
      for (int64_t j = 0; j < n_cells; ++j) {
        float vf[16];
        widen16(v + size_t(j) * v_stride + size_t(i0), vf);
        const float wj = w[r][j];
        for (int c = 0; c < 16; ++c) acc[c] = std::fma(vf[c], wj, acc[c]);
      }
      for (int c = 0; c < 16; ++c) out[r][i0 + c] = acc[c];
    }
  }
}
