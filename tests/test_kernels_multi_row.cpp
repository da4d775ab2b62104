// Multi-row dot kernels (one weight row against 2, 4 or 8 activation rows, unpacking the weights
// once) give each row exactly the single-row kernel's result, in every summation order; and
// matmul with sequence runs gives each sequence the results it gets alone.
#include <doctest/doctest.h>

#include <vector>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/matvec.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"
#include "kernels/thread_pool.h"
#include "tests/kernels_reference.h"

using sluice::GgmlType;
using sluice::kernels::GgmlRepack;
using sluice::kernels::ThreadPool;
using sluice::kernels::WeightMatrix;
using namespace sluice::test;

namespace {

// Rows quantized from random values, or random blocks for a type without a weight quantizer.
std::vector<std::byte> quantized_rows(GgmlType type, int64_t n_rows, int64_t n_cols, uint32_t seed, float scale) {
  const size_t row_bytes = sluice::ggml_row_bytes(type, uint64_t(n_cols));
  std::vector<std::byte> bytes(row_bytes * size_t(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::byte* dst = bytes.data() + size_t(r) * row_bytes;
    if (!sluice::kernels::has_weight_quantizer(type)) {
      sluice::kernels::fill_random_blocks(type, n_cols, seed + uint32_t(r), dst);
      continue;
    }
    const auto row = random_row(n_cols, seed + uint32_t(r), scale);
    sluice::kernels::quantize_row(type, row.data(), dst, n_cols);
  }
  return bytes;
}

std::vector<float> run_matmul(const WeightMatrix& w, const std::vector<float>& x, int64_t n, ThreadPool& pool,
                              std::span<const int64_t> runs = {}) {
  std::vector<float> y(size_t(n * w.n_rows));
  std::vector<std::byte> scratch(sluice::kernels::matmul_scratch_bytes(w.type, w.n_cols, n, pool.size()));
  sluice::kernels::matmul(w, x, n, y, scratch, pool, runs);
  return y;
}

}  // namespace

TEST_CASE("multi-row dot kernels equal the single-row kernel on every row, bit for bit") {
  for (const auto* level : sluice::kernels::cpu::kernel_levels()) {
    const auto& k = *level;
    constexpr int64_t n = 1024;
    int checked = 0;
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                          GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                          GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ1_S,
                          GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                          GgmlType::IQ3_S, GgmlType::IQ4_XS, GgmlType::TQ1_0, GgmlType::TQ2_0}) {
      const size_t ti = size_t(type);
      struct Order {
        const char* name;
        sluice::kernels::cpu::VecDotFn one;
        const sluice::kernels::cpu::VecDotMultiFn* multi;
      };
      const Order orders[] = {{"vec_dot", k.vec_dot[ti], k.vec_dot_multi[ti]},
                              {"repack GEMV", k.vec_dot_repack[ti], k.vec_dot_repack_multi[ti]},
                              {"repack GEMM", k.vec_dot_repack_gemm[ti], k.vec_dot_repack_gemm_multi[ti]},
                              {"llamafile", k.vec_dot_llamafile[ti], k.vec_dot_llamafile_multi[ti]},
                              {"IQ panel", k.vec_dot_panel[ti], k.vec_dot_panel_multi[ti]}};
      const auto w = quantized_rows(type, 3, n, 7 + uint32_t(ti), 0.05f);
      const GgmlType act_type = sluice::kernels::vec_dot_type(type);
      const size_t w_row = sluice::ggml_row_bytes(type, n), act_row = sluice::ggml_row_bytes(act_type, n);
      std::vector<std::byte> act(act_row * 8);
      for (int t = 0; t < 8; ++t) {
        const auto xr = random_row(n, 100 + uint32_t(t), t == 3 ? 40.0f : 1.0f);  // one row of large values
        sluice::kernels::quantize_row(act_type, xr.data(), act.data() + size_t(t) * act_row, n);
      }
      for (const Order& o : orders) {
        for (int m = 0; m < 3; ++m) {
          if (o.one == nullptr || o.multi[m] == nullptr) continue;
          const int rows = sluice::kernels::cpu::KernelTable::kMultiWidths[m];
          for (int r = 0; r < 3; ++r) {
            const std::byte* wr = w.data() + size_t(r) * w_row;
            float out[8] = {};
            o.multi[m](wr, act.data(), act_row, n, out);
            for (int t = 0; t < rows; ++t) {
              INFO(sluice::ggml_traits(type).name << " " << o.name << " x" << rows << " weight row " << r << " token " << t);
              CHECK(out[t] == o.one(wr, act.data() + size_t(t) * act_row, n));
            }
            // A stride other than the row size: rows 1 and 3 only.
            if (rows == 2) {
              o.multi[m](wr, act.data() + act_row, 2 * act_row, n, out);
              CHECK(out[0] == o.one(wr, act.data() + act_row, n));
              CHECK(out[1] == o.one(wr, act.data() + 3 * act_row, n));
            }
          }
          ++checked;
        }
      }
    }
    MESSAGE("kernel level " << std::string(k.isa) << ": " << checked << " multi-row kernels equal the one-row kernel");
    // avx2: Q4_K, Q2_K and IQ4_NL in three orders (IQ4_NL: vec_dot, repacked, llamafile), six more
    // types and the ten i-quant/ternary types in one, x2 and x4 each; x8 for Q3_K; x4 of the IQ
    // panel order for eight of them.
    if (std::string(k.isa) == "avx2") CHECK(checked == 61);
  }
}

TEST_CASE("matmul with sequence runs gives each sequence the results it gets alone") {
  ThreadPool pool(2);
  constexpr int64_t n_cols = 512, n_rows = 40;
  auto bytes = quantized_rows(GgmlType::Q4_K, n_rows, n_cols, 3, 0.05f);
  WeightMatrix w{GgmlType::Q4_K, bytes.data(), n_cols, n_rows, sluice::ggml_row_bytes(GgmlType::Q4_K, n_cols)};
  // Runs of 1, 5, 1, 4 and 2 tokens: GEMM order for the leading 4 of the 5- and 4-token runs.
  const std::vector<int64_t> runs = {0, 1, 6, 7, 11, 13};
  const int64_t n = runs.back();
  const auto x = random_row(n_cols * n, 9);
  for (GgmlRepack kind : {GgmlRepack::none, GgmlRepack::mul_mat, GgmlRepack::mul_mat_id}) {
    w.repack = kind;
    const auto batched = run_matmul(w, x, n, pool, runs);
    int differs_from_one_run = 0;
    const auto one_run = run_matmul(w, x, n, pool);
    for (size_t r = 0; r + 1 < runs.size(); ++r) {
      const int64_t a = runs[r], len = runs[r + 1] - a;
      const std::vector<float> xs(x.begin() + a * n_cols, x.begin() + (a + len) * n_cols);
      const auto alone = run_matmul(w, xs, len, pool);
      for (int64_t i = 0; i < len * n_rows; ++i) {
        INFO("repack " << int(kind) << " run " << r << " output " << i);
        REQUIRE(batched[size_t(a * n_rows + i)] == alone[size_t(i)]);
        differs_from_one_run += batched[size_t(a * n_rows + i)] != one_run[size_t(a * n_rows + i)];
      }
    }
    // Only the GEMM/GEMV split of a repacked mul_mat depends on the runs.
    if (kind == GgmlRepack::mul_mat) CHECK(differs_from_one_run > 0);
    else CHECK(differs_from_one_run == 0);
  }
  std::vector<float> y(size_t(n * n_rows));
  std::vector<std::byte> scratch(sluice::kernels::matmul_scratch_bytes(GgmlType::Q4_K, n_cols, n, pool.size()));
  const std::vector<int64_t> bad = {0, 5, 3, 13};
  CHECK_THROWS_AS(sluice::kernels::matmul(w, x, n, y, scratch, pool, bad), sluice::Error);
  const std::vector<int64_t> short_runs = {0, 12};
  CHECK_THROWS_AS(sluice::kernels::matmul(w, x, n, y, scratch, pool, short_runs), sluice::Error);
}

// llama.cpp picks a dot order per call from its token count (kernels/matvec.h): the IQ panel for
// a run of at least 8 tokens of an i-quant matrix it lists (mul_mat and mul_mat_id alike),
// llamafile's order for IQ4_NL from 2 tokens where it does not repack, the repacked order at any
// count where it does. Each token must get exactly that order's one-row dot.
TEST_CASE("matmul takes the IQ panel order from 8 tokens and IQ4_NL's llamafile order from 2, per sequence run") {
  ThreadPool pool(2);
  const auto& k = sluice::kernels::cpu::best_kernels();
  struct Case {
    GgmlType type;
    GgmlRepack repack;
    std::vector<int64_t> runs;
    int64_t min_run;  // runs this long take `batched`; shorter ones vec_dot
    sluice::kernels::cpu::VecDotFn batched;
  };
  const size_t nl = size_t(GgmlType::IQ4_NL), xs = size_t(GgmlType::IQ2_XXS), m1 = size_t(GgmlType::IQ1_M);
  const Case cases[] = {
      {GgmlType::IQ2_XXS, GgmlRepack::mul_mat, {0, 3, 11, 12, 21}, 8, k.vec_dot_panel[xs]},
      {GgmlType::IQ2_XXS, GgmlRepack::mul_mat_id, {0, 9, 16, 24}, 8, k.vec_dot_panel[xs]},
      {GgmlType::IQ1_M, GgmlRepack::mul_mat, {0, 8}, 8, k.vec_dot_panel[m1]},
      {GgmlType::IQ2_XXS, GgmlRepack::none, {0, 12}, 1 << 30, nullptr},  // a 3-D slice: vec_dot
      {GgmlType::IQ4_NL, GgmlRepack::none, {0, 1, 3, 4, 7}, 2, k.vec_dot_llamafile[nl]},
      {GgmlType::IQ4_NL, GgmlRepack::mul_mat, {0, 1, 6}, 1, k.vec_dot_repack[nl]},
      {GgmlType::IQ4_NL, GgmlRepack::mul_mat_id, {0, 1, 3}, 1, k.vec_dot_repack[nl]},
  };
  for (const Case& c : cases) {
    constexpr int64_t n_cols = 512, n_rows = 24;
    const auto bytes = quantized_rows(c.type, n_rows, n_cols, 11, 0.05f);
    const size_t w_row = sluice::ggml_row_bytes(c.type, n_cols);
    WeightMatrix w{c.type, bytes.data(), n_cols, n_rows, w_row, c.repack};
    const int64_t n = c.runs.back();
    const auto x = random_row(n_cols * n, 5);
    // One run per call where the case has one; the runs otherwise.
    const auto y = c.runs.size() == 2 ? run_matmul(w, x, n, pool) : run_matmul(w, x, n, pool, c.runs);
    const GgmlType act_type = sluice::kernels::vec_dot_type(c.type);
    const size_t act_row = sluice::ggml_row_bytes(act_type, n_cols);
    std::vector<std::byte> act(act_row);
    int batched = 0;
    for (size_t r = 0; r + 1 < c.runs.size(); ++r) {
      const bool long_run = c.runs[r + 1] - c.runs[r] >= c.min_run;
      const auto dot = long_run ? c.batched : k.vec_dot[size_t(c.type)];
      REQUIRE((dot != nullptr));
      for (int64_t t = c.runs[r]; t < c.runs[r + 1]; ++t) {
        sluice::kernels::quantize_row(act_type, x.data() + t * n_cols, act.data(), n_cols);
        for (int64_t row = 0; row < n_rows; ++row) {
          INFO(sluice::ggml_traits(c.type).name << " repack " << int(c.repack) << " token " << t << " row " << row);
          const float want = dot(bytes.data() + size_t(row) * w_row, act.data(), n_cols);
          REQUIRE(y[size_t(t * n_rows + row)] == want);
        }
        batched += long_run;
      }
    }
    if (c.batched) CHECK(batched > 0);
  }
}
