// The small kernels the forward pass is built from: rms_norm, rope, softmax, activations, top_k.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/activations.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/quant.h"
#include "kernels/vec_ops.h"

using namespace sluice::kernels;

TEST_CASE("rms_norm scales each row to unit RMS, then by the weight") {
  std::vector<float> x{3, 4, 0, 0, 1, 1, 1, 1};
  std::vector<float> w{1, 2, 1, 1};
  std::vector<float> y(8);
  rms_norm(x, w, 0.0f, 4, y);
  const float s0 = 1.0f / std::sqrt(25.0f / 4);
  CHECK(y[0] == doctest::Approx(3 * s0));
  CHECK(y[1] == doctest::Approx(8 * s0));
  CHECK(y[4] == doctest::Approx(1.0f));
  rms_norm(x, {}, 0.0f, 4, x);  // in place, no weight
  CHECK(x[1] == doctest::Approx(4 * s0));
}

TEST_CASE("YaRN correction dims match llama.cpp's numbers for the deepseek2 reference") {
  float dims[2];
  rope_yarn_corr_dims(64, 4096, 50000.0f, 32.0f, 1.0f, dims);
  CHECK(dims[0] == 8.0f);
  CHECK(dims[1] == 20.0f);
}

TEST_CASE("rope NORM rotates consecutive pairs and NEOX rotates halves") {
  RopeParams p{.mode = RopeMode::norm, .n_dims = 4, .n_ctx_orig = 4096, .freq_base = 10000.0f};
  std::vector<float> cache(4);
  rope_cache(p, 1, cache);
  CHECK(cache[0] == doctest::Approx(std::cos(1.0f)));
  CHECK(cache[1] == doctest::Approx(std::sin(1.0f)));
  CHECK(cache[2] == doctest::Approx(std::cos(0.01f)));  // 10000^(-2/4) = 0.01
  std::vector<float> x{1, 0, 1, 0, 7};                  // head_dim 5: the last value passes through
  rope_apply(p, cache, x.data(), 1, 5);
  CHECK(x[0] == doctest::Approx(std::cos(1.0f)));
  CHECK(x[1] == doctest::Approx(std::sin(1.0f)));
  CHECK(x[4] == 7.0f);
  p.mode = RopeMode::neox;
  std::vector<float> y{1, 1, 0, 0};
  rope_apply(p, cache, y.data(), 1, 4);
  CHECK(y[0] == doctest::Approx(std::cos(1.0f)));
  CHECK(y[2] == doctest::Approx(std::sin(1.0f)));
  CHECK(y[1] == doctest::Approx(std::cos(0.01f)));
  CHECK(y[3] == doctest::Approx(std::sin(0.01f)));
}

TEST_CASE("rope at position 0 is the identity, with YaRN magnitude cancelled by attn_factor") {
  const float factor = 32.0f;
  RopeParams p{.mode = RopeMode::norm, .n_dims = 64, .n_ctx_orig = 4096, .freq_base = 50000.0f,
               .freq_scale = 1.0f / factor, .ext_factor = 1.0f,
               .attn_factor = 1.0f / (1.0f + 0.1f * std::log(factor))};
  std::vector<float> cache(64);
  rope_cache(p, 0, cache);
  for (int i = 0; i < 64; i += 2) {
    CHECK(cache[i] == doctest::Approx(1.0f).epsilon(1e-6));
    CHECK(cache[i + 1] == 0.0f);
  }
  // Past the ramp (dims >= 20) YaRN interpolates: theta = pos * freq_scale * base^(-2i/n).
  rope_cache(p, 100, cache);
  const int i = 40;  // pair 20
  const float theta = 100.0f / factor * std::pow(50000.0f, -static_cast<float>(i) / 64.0f);
  CHECK(cache[i] == doctest::Approx(std::cos(theta)).epsilon(1e-4));
}

TEST_CASE("softmax normalizes, applies the scale first and handles -inf") {
  std::vector<float> x{1, 2, -std::numeric_limits<float>::infinity(), 2};
  softmax(x, 0.5f);
  CHECK(x[2] == 0.0f);
  CHECK(x[1] == x[3]);
  CHECK(x[0] + x[1] + x[2] + x[3] == doctest::Approx(1.0f));
  CHECK(x[1] / x[0] == doctest::Approx(std::exp(0.5f)));
}

TEST_CASE("sigmoid, silu and swiglu follow their definitions") {
  std::vector<float> x{-2, 0, 3}, y(3), g{1, 2, 3};
  sigmoid(x, y);
  CHECK(y[1] == 0.5f);
  CHECK(y[2] == doctest::Approx(1 / (1 + std::exp(-3.0))));
  silu(x, y);
  CHECK(y[0] == doctest::Approx(-2 / (1 + std::exp(2.0))));
  swiglu(x, g, y);
  CHECK(y[2] == doctest::Approx(3 * 3 / (1 + std::exp(-3.0))));
}

TEST_CASE("top_k returns the largest first, lower index on ties, NaN last") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x{1, nan, 5, 3, 5};
  std::vector<int32_t> out(4);
  top_k(x, out);
  CHECK(out == std::vector<int32_t>{2, 4, 3, 0});
}

TEST_CASE("vector add, mul, scale and add_scaled") {
  std::vector<float> a{1, 2}, b{3, 4}, y(2);
  add(a, b, y);
  CHECK(y == std::vector<float>{4, 6});
  mul(a, b, y);
  CHECK(y == std::vector<float>{3, 8});
  scale(a, 2, y);
  CHECK(y == std::vector<float>{2, 4});
  add_scaled(b, 0.5f, y);
  CHECK(y == std::vector<float>{3.5f, 6});
}

TEST_CASE("add_scaled_f16_rows sums each output row by row as add_scaled does, in every kernel table") {
  // 5 outputs (a block of 4 and one more), 150 rows (tiles of 64 and a remainder), 37 values (two
  // 16-value groups and a tail), a row stride wider than the row.
  constexpr int64_t n = 37, n_rows = 150, stride_values = 40;
  constexpr int n_out = 5;
  std::vector<uint16_t> rows(size_t(n_rows * stride_values));
  std::vector<float> row_f32(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const float v = std::sin(0.37f * float(i)) * 3.0f;
    sluice::kernels::quantize_row(sluice::GgmlType::F16, &v, reinterpret_cast<std::byte*>(&rows[i]), 1);
    sluice::kernels::dequantize_row(sluice::GgmlType::F16, reinterpret_cast<const std::byte*>(&rows[i]), &row_f32[i], 1);
  }
  std::vector<std::vector<float>> weights(n_out, std::vector<float>(n_rows));
  for (int g = 0; g < n_out; ++g)
    for (int64_t j = 0; j < n_rows; ++j) weights[size_t(g)][size_t(j)] = std::cos(0.11f * float(j + 7 * g)) / float(g + 1);
  // Expected: add_scaled row by row, starting from a non-zero output.
  std::vector<std::vector<float>> expected(n_out, std::vector<float>(n, 0.25f));
  for (int g = 0; g < n_out; ++g)
    for (int64_t j = 0; j < n_rows; ++j)
      add_scaled({row_f32.data() + j * stride_values, size_t(n)}, weights[size_t(g)][size_t(j)], expected[size_t(g)]);
  const float* w_ptrs[n_out];
  for (int g = 0; g < n_out; ++g) w_ptrs[g] = weights[size_t(g)].data();
  for (const auto* table : {&sluice::kernels::cpu::scalar_kernels(), &sluice::kernels::cpu::best_kernels()}) {
    std::vector<std::vector<float>> got(n_out, std::vector<float>(n, 0.25f));
    float* o_ptrs[n_out];
    for (int g = 0; g < n_out; ++g) o_ptrs[g] = got[size_t(g)].data();
    table->add_scaled_f16(reinterpret_cast<const std::byte*>(rows.data()), size_t(stride_values) * 2, n_rows, n, w_ptrs,
                          o_ptrs, n_out);
    INFO("kernel table " << table->isa);
    CHECK(got == expected);
  }
  std::vector<std::vector<float>> api(n_out, std::vector<float>(n, 0.25f));
  float* o_ptrs[n_out];
  for (int g = 0; g < n_out; ++g) o_ptrs[g] = api[size_t(g)].data();
  add_scaled_f16_rows(reinterpret_cast<const std::byte*>(rows.data()), size_t(stride_values) * 2, n_rows, n, w_ptrs,
                      o_ptrs);
  CHECK(api == expected);
}
