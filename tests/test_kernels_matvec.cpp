// ThreadPool and matvec/matmul: every row computed once, results independent of thread count,
// bad shapes rejected.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/matvec.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "tests/kernels_reference.h"

using sluice::Error;
using sluice::ErrorCode;
using sluice::GgmlType;
using sluice::kernels::ThreadPool;
using sluice::kernels::WeightMatrix;
using namespace sluice::test;

namespace {

struct QuantizedMatrix {
  std::vector<std::byte> bytes;
  WeightMatrix w;
};

QuantizedMatrix random_matrix(GgmlType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  QuantizedMatrix m;
  const size_t row_bytes = sluice::ggml_row_bytes(type, uint64_t(n_cols));
  m.bytes.resize(row_bytes * size_t(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto row = random_row(n_cols, seed + uint32_t(r), 0.05f);
    sluice::kernels::quantize_row(type, row.data(), m.bytes.data() + size_t(r) * row_bytes, n_cols);
  }
  m.w = WeightMatrix{type, m.bytes.data(), n_cols, n_rows, row_bytes};
  return m;
}

std::vector<float> run_matmul(const WeightMatrix& w, const std::vector<float>& x, int64_t n_tokens,
                              ThreadPool& pool) {
  std::vector<float> y(size_t(w.n_rows * n_tokens));
  std::vector<std::byte> scratch(sluice::kernels::matmul_scratch_bytes(w.type, w.n_cols, n_tokens, pool.size()));
  sluice::kernels::matmul(w, x, n_tokens, y, scratch, pool);
  return y;
}

}  // namespace

TEST_CASE("parallel_for visits every index exactly once for any size, grain and thread count") {
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 16, 100, 1000, 4099}) {
      for (int64_t grain : {1, 16, 64}) {
        std::vector<std::atomic<int>> hits(size_t(n) + 1);
        std::atomic<int> empty_chunks{0};  // doctest assertions are not thread-safe: count instead
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          if (b >= e) empty_chunks.fetch_add(1);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        });
        CHECK(empty_chunks.load() == 0);
        for (int64_t i = 0; i < n; ++i) REQUIRE(hits[size_t(i)].load() == 1);
      }
    }
  }
}

TEST_CASE("a thread pool survives many back-to-back calls") {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 2000; ++call)
    pool.parallel_for(256, 16, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  CHECK(total.load() == 2000 * 256);
}

TEST_CASE("matvec equals per-row vec_dot and does not depend on the thread count") {
  ThreadPool one(1), two(2), five(5);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                        GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                        GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::IQ4_NL}) {
    INFO(sluice::ggml_type_name(type));
    const auto m = random_matrix(type, 67, 512, 5);
    const auto x = random_row(512, 99);
    const auto y1 = run_matmul(m.w, x, 1, one);
    CHECK(run_matmul(m.w, x, 1, two) == y1);
    CHECK(run_matmul(m.w, x, 1, five) == y1);
    const GgmlType act_type = sluice::kernels::vec_dot_type(type);
    std::vector<std::byte> act(sluice::ggml_row_bytes(act_type, 512));
    sluice::kernels::quantize_row(act_type, x.data(), act.data(), 512);
    for (int64_t r = 0; r < 67; ++r)
      REQUIRE(y1[size_t(r)] ==
              sluice::kernels::vec_dot(type, m.w.data + size_t(r) * m.w.row_stride, act.data(), 512));
  }
}

TEST_CASE("matmul over several tokens equals one matvec per token") {
  ThreadPool pool(3);
  const auto m = random_matrix(GgmlType::Q4_K, 40, 1024, 17);
  const int64_t n_tokens = 3;
  const auto x = random_row(1024 * n_tokens, 23);
  const auto y = run_matmul(m.w, x, n_tokens, pool);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const std::vector<float> xt(x.begin() + t * 1024, x.begin() + (t + 1) * 1024);
    const auto yt = run_matmul(m.w, xt, 1, pool);
    CHECK(std::vector<float>(y.begin() + t * 40, y.begin() + (t + 1) * 40) == yt);
  }
}

TEST_CASE("a batch that walks several row tiles per thread chunk equals one matvec per token") {
  // 1536 rows of 2048 values: a chunk of 192 rows is 126 KiB of Q2_K and 165 KiB of Q3_K, more
  // than one 96 KiB row tile. 19 tokens take the x8 (Q3_K), x4, x2 and one-token kernels.
  ThreadPool pool(2);
  constexpr int64_t rows = 1536, cols = 2048, n_tokens = 19;
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K}) {
    const auto m = random_matrix(type, rows, cols, 31);
    const auto x = random_row(cols * n_tokens, 37);
    const auto y = run_matmul(m.w, x, n_tokens, pool);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
      const auto yt = run_matmul(m.w, xt, 1, pool);
      INFO(sluice::ggml_traits(type).name << " token " << t);
      CHECK(std::vector<float>(y.begin() + t * rows, y.begin() + (t + 1) * rows) == yt);
    }
  }
}

// llama.cpp (x86, REPACK) multiplies a Q4_K matrix with 8k rows in its repacked GEMV/GEMM, which
// accumulate fma(isum, d_w * d_a) and fma(min sum, dmin_w * d_a) separately, per group of
// `group` sub-blocks (GEMV: 8, 4-row GEMM: 2), and subtract at the end. Built here from the
// integer parts, independently of the kernels.
static float repacked_q4_k_dot(const std::byte* row, const std::byte* act, int64_t n, int group) {
  const auto* x = reinterpret_cast<const sluice::kernels::cpu::BlockQ4_K*>(row);
  const auto* y = reinterpret_cast<const sluice::kernels::cpu::BlockQ8_K*>(act);
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t i = 0; i < n / 256; ++i) {
    int isum = 0, imin = 0;
    for (int sb = 0; sb < 8; ++sb) {
      uint8_t sc = 0, m = 0;
      sluice::kernels::cpu::scale_min_k4(sb, x[i].scales, &sc, &m);
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = x[i].qs[32 * (sb / 2) + l];
        s += ((sb % 2 == 0) ? (byte & 0xF) : (byte >> 4)) * y[i].qs[32 * sb + l];
      }
      isum += sc * s;
      int bsum = 0;
      for (int l = 0; l < 32; ++l) bsum += y[i].qs[32 * sb + l];
      imin += m * bsum;
      if ((sb + 1) % group == 0) {
        acc = std::fma(float(isum), sluice::kernels::cpu::fp16_to_f32(x[i].d) * y[i].d, acc);
        acc_min = std::fma(float(imin), sluice::kernels::cpu::fp16_to_f32(x[i].dmin) * y[i].d, acc_min);
        isum = imin = 0;
      }
    }
  }
  return acc - acc_min;
}

TEST_CASE("a Q4_K matrix that llama.cpp repacks is summed in the repacked GEMM's and GEMV's orders, on every ISA") {
  using sluice::kernels::GgmlRepack;
  CHECK(sluice::kernels::ggml_repacks(GgmlType::Q4_K, 64));
  CHECK_FALSE(sluice::kernels::ggml_repacks(GgmlType::Q4_K, 2));  // ne[1] % 8 != 0: plain vec_dot
  CHECK_FALSE(sluice::kernels::ggml_repacks(GgmlType::Q6_K, 64));  // not repacked on x86
  ThreadPool pool(2);
  auto m = random_matrix(GgmlType::Q4_K, 64, 1024, 41);
  const int64_t n_tokens = 5;
  const auto x = random_row(1024 * n_tokens, 43);
  const auto plain = run_matmul(m.w, x, n_tokens, pool);
  const auto& scalar = sluice::kernels::cpu::scalar_kernels();
  const auto& best = sluice::kernels::cpu::best_kernels();
  const bool has_repack = scalar.vec_dot_repack[size_t(GgmlType::Q4_K)] != nullptr &&
                          scalar.vec_dot_repack_gemm[size_t(GgmlType::Q4_K)] != nullptr;
  REQUIRE(has_repack);
  std::vector<std::byte> act(sluice::ggml_row_bytes(GgmlType::Q8_K, 1024));
  for (GgmlRepack kind : {GgmlRepack::mul_mat, GgmlRepack::mul_mat_id}) {
    m.w.repack = kind;
    const auto repacked = run_matmul(m.w, x, n_tokens, pool);
    int differs = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      // mul_mat: tokens 0..3 through the GEMM, token 4 through the GEMV; mul_mat_id: all GEMV.
      const bool gemm = kind == GgmlRepack::mul_mat && t < 4;
      sluice::kernels::quantize_row(GgmlType::Q8_K, x.data() + t * 1024, act.data(), 1024);
      for (int64_t r = 0; r < 64; ++r) {
        INFO("kind " << int(kind) << " token " << t << " row " << r);
        const std::byte* row = m.w.data + size_t(r) * m.w.row_stride;
        const float want = repacked_q4_k_dot(row, act.data(), 1024, gemm ? 2 : 8);
        const float got = repacked[size_t(t * 64 + r)];
        REQUIRE(got == want);
        for (const auto* table : {&scalar, &best}) {
          const auto fn = gemm ? table->vec_dot_repack_gemm[size_t(GgmlType::Q4_K)]
                               : table->vec_dot_repack[size_t(GgmlType::Q4_K)];
          REQUIRE(fn(row, act.data(), 1024) == want);
        }
        CHECK(std::fabs(got - plain[size_t(t * 64 + r)]) <= 1e-5f * (1.0f + std::fabs(got)));
        differs += got != plain[size_t(t * 64 + r)];
      }
    }
    MESSAGE(differs << " of " << 64 * n_tokens << " outputs differ from vec_dot's order in the last bits");
    CHECK(differs > 0);  // the order does change
  }
}

TEST_CASE("matvec rejects a short scratch, a short output and a row length off the block size") {
  ThreadPool pool(2);
  const auto m = random_matrix(GgmlType::Q4_K, 4, 256, 1);
  const auto x = random_row(256, 2);
  std::vector<float> y(4);
  std::vector<std::byte> scratch(sluice::kernels::matmul_scratch_bytes(GgmlType::Q4_K, 256, 1, pool.size()));
  auto expect = [&](auto&& call, const std::string& fragment) {
    try {
      call();
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
    }
  };
  expect([&] { sluice::kernels::matvec(m.w, x, y, std::span(scratch).first(100), pool); },
         "scratch holds 100 bytes");
  expect([&] { sluice::kernels::matvec(m.w, x, std::span(y).first(3), scratch, pool); }, "y holds 3 values");
  WeightMatrix odd = m.w;
  odd.n_cols = 200;
  expect([&] { sluice::kernels::matvec(odd, x, y, scratch, pool); },
         "not a multiple of q4_K's block size 256");
}

TEST_CASE("matvec_slices gives every slice's matvec bit for bit, over strided inputs and outputs, on 1 and 2 threads") {
  // 64 heads of 48 rows x 64 values (MLA's attn_k_b shape, smaller), the heads' activations and
  // outputs interleaved with other values (x_stride and y_stride wider than a slice).
  constexpr int64_t n_slices = 64, n_rows = 48, n_cols = 64;
  constexpr size_t x_stride = 80, y_stride = 56;
  for (const GgmlType type : {GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_0}) {
    INFO("type " << sluice::ggml_traits(type).name);
    const QuantizedMatrix all = random_matrix(type, n_rows * n_slices, n_cols, 11);
    const size_t slice_bytes = all.w.row_stride * size_t(n_rows);
    WeightMatrix first = all.w;
    first.n_rows = n_rows;
    const auto x = random_row(int64_t(x_stride) * n_slices, 5, 1.0f);
    std::vector<float> expected(y_stride * n_slices, -7.0f);
    std::vector<std::byte> scratch(sluice::kernels::matmul_scratch_bytes(type, n_cols, 1, 1));
    ThreadPool one(1);
    for (int64_t s = 0; s < n_slices; ++s) {
      WeightMatrix w = first;
      w.data += size_t(s) * slice_bytes;
      sluice::kernels::matvec(w, {x.data() + size_t(s) * x_stride, size_t(n_cols)},
                              {expected.data() + size_t(s) * y_stride, size_t(n_rows)}, scratch, one);
    }
    std::vector<std::byte> slices_scratch(sluice::kernels::matvec_slices_scratch_bytes(type, n_cols, n_slices));
    for (const unsigned threads : {1u, 2u}) {
      ThreadPool pool(threads);
      std::vector<float> got(y_stride * n_slices, -7.0f);  // values between the slices stay as they are
      sluice::kernels::matvec_slices(first, slice_bytes, n_slices, x.data(), x_stride, got.data(), y_stride,
                                     slices_scratch, pool);
      CHECK(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
    }
  }
  // Repacked or float matrices keep matmul's own paths.
  const QuantizedMatrix q4k = random_matrix(GgmlType::Q4_K, 16, 256, 3);
  WeightMatrix repacked = q4k.w;
  repacked.repack = sluice::kernels::GgmlRepack::mul_mat;
  std::vector<float> x(256), y(16);
  std::vector<std::byte> scratch(4096);
  ThreadPool pool(1);
  CHECK_THROWS_AS(sluice::kernels::matvec_slices(repacked, 0, 1, x.data(), 0, y.data(), 0, scratch, pool), Error);
}
