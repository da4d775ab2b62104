#include "core/compute/matmul.h"

#include "kernels/dot_f32.h"

namespace sluice::core {

namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// One sequence's rows (or a batch whose order does not depend on the row count).
void matmul_rows(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y, MatKind kind,
                 std::span<std::byte> scratch, kernels::ThreadPool& pool, MatmulOffload* offload) {
  if (offload && offload->try_matmul(w, x, n, y)) return;
  if (w.type == GgmlType::F32) {  // no conversion: a permuted activation stays on the vector path
    kernels::matmul_f32_ggml(w, {x, sz(n * w.n_cols)}, n, {y, sz(n * w.n_rows)}, kind == MatKind::plain, pool);
    return;
  }
  if (w.type == GgmlType::F16 && w.n_cols <= 8192) {  // converted to F16 first, then llamafile may take it
    kernels::matmul_f16_ggml(w, {x, sz(n * w.n_cols)}, n, {y, sz(n * w.n_rows)}, kind != MatKind::vector, false,
                             {reinterpret_cast<float*>(scratch.data()), scratch.size() / sizeof(float)}, pool);
    return;
  }
  kernels::matmul(w, {x, sz(n * w.n_cols)}, n, {y, sz(n * w.n_rows)}, scratch, pool);
}

}  // namespace

void matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y, MatKind kind,
            std::span<std::byte> scratch, kernels::ThreadPool& pool, MatmulOffload* offload,
            std::span<const int64_t> runs) {
  const bool quantized_order = kernels::order_depends_on_tokens(w);
  const bool order_depends_on_rows =
      quantized_order || (kind != MatKind::vector && (w.type == GgmlType::F32 || w.type == GgmlType::F16));
  if (order_depends_on_rows && runs.size() > 2) {
    // The quantized kernels take the runs themselves and keep every sequence's order while
    // unpacking each weight block once for the whole batch (an offloaded product still splits).
    if (quantized_order && !offload) {
      kernels::matmul(w, {x, sz(n * w.n_cols)}, n, {y, sz(n * w.n_rows)}, scratch, pool, runs);
      return;
    }
    for (size_t r = 0; r + 1 < runs.size(); ++r)
      matmul_rows(w, x + runs[r] * w.n_cols, runs[r + 1] - runs[r], y + runs[r] * w.n_rows, kind, scratch, pool, offload);
    return;
  }
  matmul_rows(w, x, n, y, kind, scratch, pool, offload);
}

void split_rows_by_run(std::span<const int64_t> token_runs, std::span<const int32_t> rows, int64_t n_used,
                       std::vector<int64_t>& out) {
  out.clear();
  size_t run = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t t = rows[r] / n_used;
    if (r > 0 && t < token_runs[run + 1]) continue;
    while (t >= token_runs[run + 1]) ++run;
    out.push_back(static_cast<int64_t>(r));
  }
  out.push_back(static_cast<int64_t>(rows.size()));
}

}  // namespace sluice::core
