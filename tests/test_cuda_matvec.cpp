// CUDA matvec / matmul against the CPU layer for every weight type, on random matrices with
// fixed seeds. Reference: the CPU layer's dequantize_row, dotted with x in double. The GPU
// dequantizes exactly that and sums in f32, so normalized MSE <= 1e-10 (f32 rounding only).
// Against the CPU's own matvec (which quantizes x to the type's vec_dot_type first) the bound is
// the activation quantization's, 2e-3 (q8 activations give ~1e-5; bf16/f16 x rounding less).
#include <doctest/doctest.h>

#if SLUICE_HAVE_CUDA

#include <string>
#include <vector>

#include "common/error.h"
#include "common/ggml_type.h"
#include "kernels/cuda/ops.h"
#include "kernels/matvec.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"
#include "kernels/thread_pool.h"
#include "tests/cuda_test_util.h"
#include "tests/kernels_reference.h"

namespace cu = sluice::kernels::cuda;
using sluice::GgmlType;
using namespace sluice::test;

namespace {

constexpr double kTolExact = 1e-10;  // vs dequantize_row + double dot
constexpr double kTolCpu = 2e-3;     // vs kernels::matvec / matmul (quantized activations)

const GgmlType kTypes[] = {GgmlType::F32,    GgmlType::F16,   GgmlType::BF16,    GgmlType::Q8_0,   GgmlType::Q4_0,
                           GgmlType::Q4_1,   GgmlType::Q5_0,  GgmlType::Q5_1,    GgmlType::Q2_K,   GgmlType::Q3_K,
                           GgmlType::Q4_K,   GgmlType::Q5_K,  GgmlType::Q6_K,    GgmlType::MXFP4,  GgmlType::IQ4_NL,
                           GgmlType::IQ1_S,  GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                           GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ4_XS, GgmlType::TQ1_0,  GgmlType::TQ2_0};

struct HostMatrix {
  std::vector<std::byte> bytes;
  size_t row_bytes = 0, row_stride = 0;
  int64_t n_rows = 0, n_cols = 0;
};

// Rows quantized by the CPU layer (random valid blocks for the types without a weight quantizer:
// the i-quants and ternary types); `pad` extra bytes between rows exercise row_stride.
HostMatrix random_matrix(GgmlType type, int64_t n_rows, int64_t n_cols, size_t pad, uint32_t seed) {
  HostMatrix m;
  m.n_rows = n_rows;
  m.n_cols = n_cols;
  m.row_bytes = sluice::ggml_row_bytes(type, uint64_t(n_cols));
  m.row_stride = m.row_bytes + pad;
  m.bytes.assign(m.row_stride * size_t(n_rows), std::byte{0x5a});
  for (int64_t r = 0; r < n_rows; ++r) {
    std::byte* dst = m.bytes.data() + size_t(r) * m.row_stride;
    if (!sluice::kernels::has_weight_quantizer(type)) {
      sluice::kernels::fill_random_blocks(type, n_cols, seed + uint32_t(r), dst);
      continue;
    }
    const auto row = random_row(n_cols, seed + uint32_t(r), 0.05f);
    sluice::kernels::quantize_row(type, row.data(), dst, n_cols);
  }
  return m;
}

// y[t][r] = sum_i dequant(W[r])[i] * x[t][i], in double.
std::vector<float> reference(GgmlType type, const HostMatrix& m, const std::vector<float>& x, int64_t n_tokens) {
  std::vector<float> w(size_t(m.n_cols)), y(size_t(n_tokens * m.n_rows));
  for (int64_t r = 0; r < m.n_rows; ++r) {
    sluice::kernels::dequantize_row(type, m.bytes.data() + size_t(r) * m.row_stride, w.data(), m.n_cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (int64_t i = 0; i < m.n_cols; ++i) s += double(w[size_t(i)]) * double(x[size_t(t * m.n_cols + i)]);
      y[size_t(t * m.n_rows + r)] = float(s);
    }
  }
  return y;
}

// The CPU layer's matmul on the same (densely packed) matrix.
std::vector<float> cpu_matmul(GgmlType type, const HostMatrix& m, const std::vector<float>& x, int64_t n_tokens) {
  const sluice::kernels::WeightMatrix w{type, m.bytes.data(), m.n_cols, m.n_rows, m.row_stride};
  std::vector<float> y(size_t(n_tokens * m.n_rows));
  sluice::kernels::ThreadPool pool(2);
  std::vector<std::byte> scratch(sluice::kernels::matmul_scratch_bytes(type, m.n_cols, n_tokens, pool.size()));
  sluice::kernels::matmul(w, x, n_tokens, y, scratch, pool);
  return y;
}

}  // namespace

TEST_CASE("cuda matvec and matmul match the CPU layer for every weight type") {
  if (skip_without_gpu()) return;
  cu::Stream stream;
  for (GgmlType type : kTypes) {
    const bool is_float = sluice::ggml_traits(type).block_size == 1;
    // Float types take any row length; block types a multiple of 256 covers every block size.
    const int64_t n_cols = is_float ? 1000 : 1024;
    const int64_t n_rows = 77;  // not a multiple of the 16 rows a matvec block covers
    const size_t pad = type == GgmlType::MXFP4 ? 3 : 4;
    const HostMatrix m = random_matrix(type, n_rows, n_cols, pad, 100);
    const auto dw = to_device(m.bytes, stream);
    const cu::DeviceMatrix w{type, dw.data(), n_cols, n_rows, m.row_stride};
    for (int64_t n_tokens : {1, 3, 8, 19}) {
      // One float of offset makes x 4- but not 16-byte aligned: the kernel's scalar x path.
      for (int offset : {0, 1}) {
        INFO("type " << sluice::ggml_type_name(type) << ", " << n_tokens << " tokens, x offset " << offset);
        const auto x = random_row(n_tokens * n_cols, 7 + uint32_t(n_tokens), 1.0f);
        std::vector<float> xs(size_t(offset), 0.0f);
        xs.insert(xs.end(), x.begin(), x.end());
        const auto dx = to_device(xs, stream);
        cu::DeviceBuffer dy(size_t(n_tokens * n_rows) * 4);
        if (n_tokens == 1) cu::matvec(w, dev_ptr<float>(dx) + offset, dev_ptr<float>(dy), stream);
        else cu::matmul(w, dev_ptr<float>(dx) + offset, n_tokens, dev_ptr<float>(dy), stream);
        const auto y = to_host<float>(dy, size_t(n_tokens * n_rows), stream);
        const double e_exact = nmse(y, reference(type, m, x, n_tokens));
        CHECK(e_exact <= kTolExact);
        if (offset == 0) {
          const double e_cpu = nmse(y, cpu_matmul(type, m, x, n_tokens));
          CHECK(e_cpu <= kTolCpu);
          if (n_tokens == 1) MESSAGE(sluice::ggml_type_name(type) << ": nmse " << e_exact << " exact, " << e_cpu << " vs CPU matvec");
        }
      }
    }
  }
}

TEST_CASE("cuda matvec on tall matrices (two rows per warp) matches the CPU layer for every weight type") {
  if (skip_without_gpu()) return;
  cu::Stream stream;
  const int64_t n_cols = 256, n_rows = 16384 + 9;  // past the two-rows threshold; odd: a lone last row
  const auto x = random_row(n_cols, 5, 1.0f);
  const auto dx = to_device(x, stream);
  for (GgmlType type : kTypes) {
    INFO("type " << sluice::ggml_type_name(type));
    const HostMatrix m = random_matrix(type, n_rows, n_cols, 0, 900);
    const auto dw = to_device(m.bytes, stream);
    const cu::DeviceMatrix w{type, dw.data(), n_cols, n_rows, m.row_stride};
    cu::DeviceBuffer dy(size_t(n_rows) * 4);
    cu::matvec(w, dev_ptr<float>(dx), dev_ptr<float>(dy), stream);
    CHECK(nmse(to_host<float>(dy, size_t(n_rows), stream), reference(type, m, x, 1)) <= kTolExact);
  }
}

TEST_CASE("cuda matvec rejects shapes and layouts it cannot compute, before launching") {
  if (skip_without_gpu()) return;
  cu::Stream stream;
  cu::DeviceBuffer buf(1 << 16);
  auto* f = dev_ptr<float>(buf);
  const auto expect_invalid = [&](const cu::DeviceMatrix& w, const char* needle) {
    try {
      cu::matvec(w, f, f + 4096, stream);
      FAIL("accepted");
    } catch (const sluice::Error& e) {
      INFO(e.what());
      CHECK(e.code() == sluice::ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  expect_invalid({GgmlType::Q4_K, buf.data(), 100, 4, 144}, "not a multiple of the block size 256");
  expect_invalid({GgmlType::Q8_0, buf.data(), 64, 4, 34}, "row stride 34 bytes is below the row size 68");
  expect_invalid({GgmlType::Q4_0, buf.data() + 1, 32, 4, 18}, "2-byte aligned");
  try {
    cu::matvec({GgmlType::I32, buf.data(), 256, 1, 1024}, f, f + 4096, stream);  // no kernel on any layer
    FAIL("accepted");
  } catch (const sluice::Error& e) {
    CHECK(e.code() == sluice::ErrorCode::unsupported);
  }
  // Nothing was launched: the stream is clean.
  stream.synchronize();
}

#endif  // SLUICE_HAVE_CUDA
