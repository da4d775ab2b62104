// matvec / matmul: quantize the activation once, then split weight rows over the pool.
// Each output element is one vec_dot of one weight row, computed the same way whichever thread
// runs it, so results do not depend on the thread count.
#include "kernels/matvec.h"

#include <cstdint>
#include <string>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/quant.h"

namespace sluice::kernels {
namespace {

// Rows per chunk: at least 16 so that neighbouring threads never share a cache line of y.
constexpr int64_t kRowGrain = 16;

void check_shapes(const WeightMatrix& w, size_t x_size, int64_t n_tokens, size_t y_size,
                  const std::byte* scratch_data, size_t scratch_size) {
  require_supported(w.type, "matvec weight");
  const auto& traits = ggml_traits(w.type);
  auto fail = [](const std::string& msg) { throw Error(ErrorCode::invalid_argument, msg); };
  if (w.n_cols <= 0 || w.n_rows < 0 || n_tokens < 0)
    fail("matvec: bad shape " + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) + " with " +
         std::to_string(n_tokens) + " tokens");
  if (w.n_rows > 0 && w.data == nullptr) fail("matvec: weight matrix has no data");
  if (w.n_cols % traits.block_size != 0)
    fail("matvec: row length " + std::to_string(w.n_cols) + " is not a multiple of " +
         std::string(traits.name) + "'s block size " + std::to_string(traits.block_size));
  const uint64_t act_block = ggml_traits(vec_dot_type(w.type)).block_size;
  if (w.n_cols % act_block != 0)
    fail("matvec: row length " + std::to_string(w.n_cols) +
         " is not a multiple of the activation block size " + std::to_string(act_block));
  if (w.row_stride < ggml_row_bytes(w.type, uint64_t(w.n_cols)))
    fail("matvec: row stride smaller than a row");
  if (x_size < size_t(w.n_cols * n_tokens))
    fail("matvec: x holds " + std::to_string(x_size) + " values, needs " +
         std::to_string(w.n_cols * n_tokens));
  if (y_size < size_t(w.n_rows * n_tokens))
    fail("matvec: y holds " + std::to_string(y_size) + " values, needs " +
         std::to_string(w.n_rows * n_tokens));
  if (reinterpret_cast<uintptr_t>(scratch_data) % 4 != 0) fail("matvec: scratch must be 4-byte aligned");
  if (scratch_size < matmul_scratch_bytes(w.type, w.n_cols, n_tokens))
    fail("matvec: scratch holds " + std::to_string(scratch_size) + " bytes, needs " +
         std::to_string(matmul_scratch_bytes(w.type, w.n_cols, n_tokens)));
}

}  // namespace

bool ggml_repacks(GgmlType type, int64_t n_rows) { return type == GgmlType::Q4_K && n_rows % 8 == 0; }

size_t matmul_scratch_bytes(GgmlType weight_type, int64_t n_cols, int64_t n_tokens) {
  return size_t(ggml_row_bytes(vec_dot_type(weight_type), uint64_t(n_cols))) * size_t(n_tokens);
}

void matvec(const WeightMatrix& w, std::span<const float> x, std::span<float> y, std::span<std::byte> scratch,
            ThreadPool& pool) {
  matmul(w, x, 1, y, scratch, pool);
}

void matmul(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
            std::span<std::byte> scratch, ThreadPool& pool) {
  check_shapes(w, x.size(), n_tokens, y.size(), scratch.data(), scratch.size());
  const cpu::KernelTable& k = cpu::best_kernels();
  const GgmlType act_type = vec_dot_type(w.type);
  const size_t act_row = ggml_row_bytes(act_type, uint64_t(w.n_cols));
  const auto quantize = k.quantize[size_t(act_type)];
  // The dot of token t: vec_dot, or for a matrix llama.cpp repacks the GEMM's order for the first
  // gemm_tokens tokens (whole groups of 4, when there are at least 4) and the GEMV's for the rest.
  cpu::VecDotFn dot = k.vec_dot[size_t(w.type)], gemm_dot = dot;
  int64_t gemm_tokens = 0;
  if (w.repack != GgmlRepack::none && k.vec_dot_repack[size_t(w.type)] != nullptr) {
    dot = gemm_dot = k.vec_dot_repack[size_t(w.type)];
    if (w.repack == GgmlRepack::mul_mat && n_tokens > 3) {
      gemm_dot = k.vec_dot_repack_gemm[size_t(w.type)];
      gemm_tokens = n_tokens - n_tokens % 4;
    }
  }
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize(x.data() + t * w.n_cols, scratch.data() + t * act_row, w.n_cols);

  struct Task {
    const WeightMatrix& w;
    const std::byte* act;
    size_t act_row;
    int64_t n_tokens;
    int64_t gemm_tokens;
    float* y;
    cpu::VecDotFn dot;
    cpu::VecDotFn gemm_dot;
  } task{w, scratch.data(), act_row, n_tokens, gemm_tokens, y.data(), dot, gemm_dot};
  pool.parallel_for(w.n_rows, kRowGrain, [&task](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const std::byte* row = task.w.data + size_t(r) * task.w.row_stride;
      // One weight row against every token while it is hot in cache.
      for (int64_t t = 0; t < task.n_tokens; ++t)
        task.y[t * task.w.n_rows + r] =
            (t < task.gemm_tokens ? task.gemm_dot : task.dot)(row, task.act + size_t(t) * task.act_row, task.w.n_cols);
    }
  });
}

}  // namespace sluice::kernels
