// The body of dot_f16_rows, compiled twice: with the AVX2 flags (dot_f16_rows_avx2.cpp: two heads
// per pass, its 16 ymm registers hold their 8 accumulators and the 4 widened row vectors) and with
// the AVX-512 ones (dot_f16_rows_avx512.cpp: four heads per pass in 32 registers; still 256-bit
// instructions). Each head's dot is avx2::vec_dot_f16's, operation for operation: four 8-lane
// accumulators over 32-value steps, one 8-value step into the first, the same reduction and a
// scalar tail; only the widening of each row (shared by the heads) and of q (once per call, not
// per row: exact either way) moved. Include inside a namespace after avx2_common.h and blocks.h.

// q widened once: at most kMaxHeads heads of kMaxValues values (larger calls take vec_dot per head).
constexpr int kRowsMaxHeads = 8;
constexpr int64_t kRowsMaxValues = 1024;

inline __m256 widen8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int NH>
void dot_rows_heads(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const float* q,
                    size_t q_stride, float* const* out) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const auto* x = reinterpret_cast<const uint16_t*>(rows + size_t(j) * row_stride);
    __m256 acc[NH][4];
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 4; ++k) acc[h][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      __m256 v[4];
      for (int k = 0; k < 4; ++k) v[k] = widen8(x + i + 8 * k);
      for (int h = 0; h < NH; ++h)
        for (int k = 0; k < 4; ++k)
          acc[h][k] = _mm256_fmadd_ps(v[k], _mm256_loadu_ps(q + size_t(h) * q_stride + size_t(i) + 8 * size_t(k)), acc[h][k]);
    }
    const int64_t i_vec = i;
    for (int h = 0; h < NH; ++h) {
      const float* qh = q + size_t(h) * q_stride;
      __m256 a0 = acc[h][0];
      for (i = i_vec; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(widen8(x + i), _mm256_loadu_ps(qh + i), a0);
      float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, acc[h][1]), _mm256_add_ps(acc[h][2], acc[h][3])));
      for (; i < n; ++i) sum += half_to_f32(x[i]) * qh[i];
      out[h][j] = sum;
    }
  }
}

// dot_f16_rows (dispatch.h) with kPass heads per pass over the rows.
template <int kPass>
void dot_f16_rows_impl(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n, const uint16_t* const* q,
                       int n_q, float* const* out) {
  if (n > kRowsMaxValues || n_q > kRowsMaxHeads) {
    for (int h = 0; h < n_q; ++h)
      for (int64_t j = 0; j < n_rows; ++j) out[h][j] = vec_dot_f16(rows + size_t(j) * row_stride, q[h], n);
    return;
  }
  alignas(32) float qf[kRowsMaxHeads][kRowsMaxValues];
  for (int h = 0; h < n_q; ++h)
    for (int64_t i = 0; i < n; ++i) qf[h][i] = half_to_f32(q[h][i]);
  int h = 0;
  for (; h + kPass <= n_q; h += kPass) dot_rows_heads<kPass>(rows, row_stride, n_rows, n, qf[h], kRowsMaxValues, out + h);
  for (; h + 2 <= n_q; h += 2) dot_rows_heads<2>(rows, row_stride, n_rows, n, qf[h], kRowsMaxValues, out + h);
  for (; h < n_q; ++h) dot_rows_heads<1>(rows, row_stride, n_rows, n, qf[h], kRowsMaxValues, out + h);
}
