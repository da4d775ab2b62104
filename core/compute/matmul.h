// matmul: the one weight-product dispatch of every architecture's session.
//
// A weight matrix meets activation rows the way llama.cpp's CPU graph computes that product,
// which decides the summation order and the activation rounding (kernels/dot_f32.h):
//   F32 weights            matmul_f32_ggml: llamafile's tinyBLAS order for a plain mul_mat of a
//                          contiguous activation, ggml_vec_dot_f32's order otherwise;
//   F16 weights (<= 8192   matmul_f16_ggml: the activation rounded to F16, then llamafile's order
//   columns)               unless ggml takes its vector path;
//   everything else        kernels::matmul: activation rows quantized to the weight's
//                          vec_dot_type, repacked orders where llama.cpp repacks.
// MatKind says how ggml meets the product:
//   plain      a mul_mat of a contiguous activation,
//   permuted   a permuted activation (an MLA q_nope view): no tinyBLAS for F32,
//   vector     ggml's vector path (mul_mat_id of routed experts, and products llama.cpp also runs
//              there, e.g. kimi-k3's KDA beta): no llamafile for F16.
//
// Several sequences in one batch (`runs`: row boundaries from 0 to n, more than one run): a
// product whose order depends on the row count (F32, F16, matrices repacked for mul_mat, and the
// IQ panel's types for mul_mat and an expert's mul_mat_id: kernels::order_depends_on_tokens) runs
// per sequence so each gets its single-run numbers; the quantized kernel takes the runs itself. An offload (core/compute/matmul_offload.h), when given, is offered each product first
// (per sequence when split), and the CPU computes what it declines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/compute/matmul_offload.h"
#include "kernels/matvec.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

enum class MatKind { plain, permuted, vector };

// Y[t][w.n_rows] = W X[t][w.n_cols] for t < n. `scratch`: at least kernels::matmul_scratch_bytes
// of the weight types met, and 4 x n x n_cols bytes for F16 weights.
void matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y, MatKind kind,
            std::span<std::byte> scratch, kernels::ThreadPool& pool, MatmulOffload* offload = nullptr,
            std::span<const int64_t> runs = {});

// The runs of one expert's gathered rows, for matmul's `runs`: `rows` holds, ascending, the
// (token * n_used + slot) indices routed to the expert, `token_runs` the batch's sequence runs
// (boundaries from 0 to its token count). `out` gets the row boundaries, from 0 to rows.size(),
// where a row's token enters another run: each sequence's rows of the expert form one run, whose
// length decides its order as in a batch of that sequence alone (the IQ panel from 8 rows).
void split_rows_by_run(std::span<const int64_t> token_runs, std::span<const int32_t> rows, int64_t n_used,
                       std::vector<int64_t>& out);

}  // namespace sluice::core
