// Attention's batched products on an F16 KV cache in llamafile's tinyBLAS order (dispatch.h:
// dot_f16_rows_tinyblas, fma_f16_lanes): every kernel level gives dot_f32_tinyblas's bits over the
// widened values, for the scores (key rows against q rows) and for the value sums (V^T kq over
// cells split into tiles, lanes by absolute cell, then reduce_tinyblas_lanes).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/dot_f32.h"
#include "kernels/quant.h"
#include "kernels/vec_ops.h"

using sluice::GgmlType;
using sluice::kernels::cpu::KernelTable;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// n F16 values at dst (and their exact widening at wide): a smooth pattern with varied signs.
void f16_row(int64_t n, float phase, std::byte* dst, float* wide) {
  std::vector<float> src(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) src[size_t(i)] = std::sin(0.37f * float(i) + phase) * (1.0f + 0.01f * float(i % 7));
  sluice::kernels::quantize_row(GgmlType::F16, src.data(), dst, n);
  sluice::kernels::dequantize_row(GgmlType::F16, dst, wide, n);
}

}  // namespace

TEST_CASE("dot_f16_rows_tinyblas gives dot_f32_tinyblas's bits over the widened rows on every level") {
  // Lengths: one 16-value step, a head's 128, MLA's 576, one past the AVX-512 kernel's widened-q
  // buffer (its avx2 fallback) and past the plain bodies' 1024-value chunk; query counts around the
  // 4-row register tile and the 8-row groups.
  for (const int64_t n : {int64_t(16), int64_t(128), int64_t(576), int64_t(1040)}) {
    constexpr int64_t n_rows = 23;  // 4-row tiles and a tail of 3
    const size_t stride = size_t(n + 16) * 2;
    std::vector<std::byte> rows(stride * n_rows);
    std::vector<float> rows_wide(size_t(n * n_rows));
    for (int64_t j = 0; j < n_rows; ++j) f16_row(n, 0.5f * float(j), rows.data() + size_t(j) * stride, rows_wide.data() + j * n);
    for (int n_q = 1; n_q <= 9; ++n_q) {
      std::vector<std::vector<std::byte>> q(static_cast<size_t>(n_q), std::vector<std::byte>(static_cast<size_t>(n) * 2));
      std::vector<std::vector<float>> q_wide(size_t(n_q), std::vector<float>(static_cast<size_t>(n)));
      std::vector<const uint16_t*> q_ptrs;
      for (int h = 0; h < n_q; ++h) {
        f16_row(n, 3.1f + 1.7f * float(h), q[size_t(h)].data(), q_wide[size_t(h)].data());
        q_ptrs.push_back(reinterpret_cast<const uint16_t*>(q[size_t(h)].data()));
      }
      for (const KernelTable* t : sluice::kernels::cpu::kernel_levels()) {
        INFO("level " << t->isa << ", n " << n << ", q rows " << n_q);
        REQUIRE(bool(t->dot_f16_rows_tinyblas));
        std::vector<std::vector<float>> got(static_cast<size_t>(n_q), std::vector<float>(static_cast<size_t>(n_rows)));
        std::vector<float*> out_ptrs;
        for (auto& g : got) out_ptrs.push_back(g.data());
        t->dot_f16_rows_tinyblas(rows.data(), stride, n_rows, n, q_ptrs.data(), n_q, out_ptrs.data());
        int differ = 0;
        for (int h = 0; h < n_q; ++h)
          for (int64_t j = 0; j < n_rows; ++j)
            differ += !same_bits(got[size_t(h)][size_t(j)],
                                 sluice::kernels::dot_f32_tinyblas(rows_wide.data() + j * n, q_wide[size_t(h)].data(), n));
        CHECK(differ == 0);
      }
    }
  }
}

TEST_CASE("fma_f16_lanes over tiles of cells, then reduce_tinyblas_lanes, gives dot_f32_tinyblas's bits per channel") {
  // V^T kq as ggml's tinyBLAS sums it: channel i's output is dot_f32_tinyblas over every cell of
  // (v_c[i], weight c), the cells padded with zero weights to a multiple of 16. Cells go through in
  // tiles whose edges fall inside 16-cell chunks, so a lane must follow the absolute cell, and one
  // tile longer than the SIMD kernels' transposed group of cells.
  constexpr int64_t n_cells = 403;  // the last tile longer than the SIMD kernels' transposed group
  const std::vector<int64_t> edges = {0, 64, 100, 101, 160, n_cells};
  const int64_t padded = (n_cells + 15) / 16 * 16;
  for (const int64_t n : {int64_t(16), int64_t(40), int64_t(128), int64_t(512), int64_t(1040)}) {
    const size_t stride = size_t(n + 16) * 2;
    std::vector<std::byte> rows(stride * n_cells);
    std::vector<float> rows_wide(size_t(n * n_cells));
    for (int64_t c = 0; c < n_cells; ++c) f16_row(n, 0.3f * float(c), rows.data() + size_t(c) * stride, rows_wide.data() + c * n);
    for (int n_out = 1; n_out <= 7; ++n_out) {
      std::vector<std::vector<float>> weight(size_t(n_out), std::vector<float>(size_t(padded), 0.0f));
      for (int g = 0; g < n_out; ++g)
        for (int64_t c = 0; c < n_cells; ++c) weight[size_t(g)][size_t(c)] = std::cos(0.21f * float(c * (g + 1))) / float(c + 1);
      for (const KernelTable* t : sluice::kernels::cpu::kernel_levels()) {
        INFO("level " << t->isa << ", n " << n << ", outputs " << n_out);
        REQUIRE(bool(t->fma_f16_lanes));
        std::vector<std::vector<float>> lanes(size_t(n_out), std::vector<float>(size_t(16 * n), 0.0f));
        std::vector<float*> lane_ptrs;
        for (auto& l : lanes) lane_ptrs.push_back(l.data());
        std::vector<float> scratch(sluice::kernels::fma_f16_rows_scratch_floats(n, n_out, n_cells + 16));
        for (size_t e = 0; e + 1 < edges.size(); ++e) {
          const int64_t c0 = edges[e], c1 = edges[e + 1];
          std::vector<const float*> w_ptrs;
          for (const auto& w : weight) w_ptrs.push_back(w.data() + c0);
          t->fma_f16_lanes(rows.data() + size_t(c0) * stride, stride, c0, c1 - c0, n, w_ptrs.data(), lane_ptrs.data(), n_out,
                           scratch.data());
        }
        int differ = 0;
        std::vector<float> column(static_cast<size_t>(padded), 0.0f), out(static_cast<size_t>(n));
        for (int g = 0; g < n_out; ++g) {
          sluice::kernels::reduce_tinyblas_lanes(lanes[size_t(g)].data(), n, out.data());
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t c = 0; c < n_cells; ++c) column[size_t(c)] = rows_wide[size_t(c * n + i)];
            differ += !same_bits(out[size_t(i)], sluice::kernels::dot_f32_tinyblas(column.data(), weight[size_t(g)].data(), padded));
          }
        }
        CHECK(differ == 0);
      }
    }
  }
}
