// matmul_f32_ggml computes every (row, token) as the one dot ggml would (kernels/dot_f32.h), to
// the bit, whatever grouping of tokens it runs them in.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kernels/dot_f32.h"
#include "kernels/thread_pool.h"
#include "tests/kernels_reference.h"

using sluice::GgmlType;
using sluice::kernels::ThreadPool;
using sluice::kernels::WeightMatrix;

TEST_CASE("matmul_f32_ggml gives each (row, token) exactly its own tinyBLAS or ggml_vec_dot_f32 dot, for any token count") {
  constexpr int64_t n_cols = 176, n_rows = 37;  // 176 = 11 x 16 (tinyBLAS) and not a multiple of 64
  const auto wv = sluice::test::random_row(n_cols * n_rows, 3, 0.5f);
  const WeightMatrix w{GgmlType::F32, reinterpret_cast<const std::byte*>(wv.data()), n_cols, n_rows, n_cols * sizeof(float)};
  ThreadPool pool(2);
  for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 8, 13}) {
    const auto x = sluice::test::random_row(n_cols * n_tokens, 10 + uint32_t(n_tokens), 1.0f);
    for (bool contiguous : {true, false}) {
      std::vector<float> y(size_t(n_rows * n_tokens));
      sluice::kernels::matmul_f32_ggml(w, x, n_tokens, y, contiguous, pool);
      const bool tiny = contiguous && n_tokens >= 2;
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < n_rows; ++r) {
          const float* wr = wv.data() + r * n_cols;
          const float* xt = x.data() + t * n_cols;
          const float want = tiny ? sluice::kernels::dot_f32_tinyblas(wr, xt, n_cols)
                                  : sluice::kernels::dot_f32_ggml_vec(wr, xt, n_cols);
          const float got = y[size_t(t * n_rows + r)];
          INFO("tokens " << n_tokens << " contiguous " << contiguous << " token " << t << " row " << r);
          REQUIRE(std::memcmp(&got, &want, sizeof got) == 0);
        }
    }
  }
}
