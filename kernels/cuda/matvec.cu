// Host launchers of matvec / matmul: shape and alignment checks, then one kernel per type.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "common/error.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dequant_float.cuh"
#include "kernels/cuda/dequant_iquants.cuh"
#include "kernels/cuda/dequant_kquants.cuh"
#include "kernels/cuda/dequant_legacy.cuh"
#include "kernels/cuda/dequant_ternary.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/cuda/ops.h"

namespace sluice::kernels::cuda {

namespace {

// Tall matrices: each warp takes two rows, so one x load feeds both (half the L1 traffic of x).
// Shorter ones (MoE experts: a few thousand rows) keep one row per warp: twice the warps in
// flight, which is what keeps HBM busy when the grid is only a few blocks per SM.
constexpr int64_t kTwoRowsMinRows = 16384;
constexpr int kMatmulTokens = 8;       // tokens per pass over a weight row

std::string type_label(GgmlType type) { return std::string(ggml_type_name(type)); }

template <class D>
void launch(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, cudaStream_t stream) {
  const std::string what = "matvec " + type_label(w.type);
  if (w.n_cols % D::kQK != 0)
    throw Error(ErrorCode::invalid_argument, what + ": row length " + std::to_string(w.n_cols) +
                                                 " is not a multiple of the block size " + std::to_string(D::kQK));
  const uint64_t row_bytes = uint64_t(w.n_cols) / D::kQK * D::kBytes;
  if (w.row_stride < row_bytes)
    throw Error(ErrorCode::invalid_argument, what + ": row stride " + std::to_string(w.row_stride) +
                                                 " bytes is below the row size " + std::to_string(row_bytes));
  if (reinterpret_cast<uintptr_t>(w.data) % D::kAlign != 0 || w.row_stride % D::kAlign != 0)
    throw Error(ErrorCode::invalid_argument,
                what + ": weights and row stride must be " + std::to_string(D::kAlign) + "-byte aligned");
  if (reinterpret_cast<uintptr_t>(x) % 4 != 0 || reinterpret_cast<uintptr_t>(y) % 4 != 0)
    throw Error(ErrorCode::invalid_argument, what + ": x and y must be 4-byte aligned");
  const auto* wp = reinterpret_cast<const uint8_t*>(w.data);
  const bool x_aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int n_cols = int(w.n_cols);
  if (n_tokens == 1 && w.n_rows >= kTwoRowsMinRows) {
    constexpr int kRowsPerBlock = detail::kMatvecWarps * 2;
    const dim3 grid(unsigned((w.n_rows + kRowsPerBlock - 1) / kRowsPerBlock), 1);
    detail::clear_last_error();
    detail::matvec_kernel<D, 2, 1>
        <<<grid, detail::kMatvecWarps * 32, 0, stream>>>(wp, w.row_stride, w.n_rows, n_cols, x, 1, x_aligned, y);
  } else if (n_tokens == 1) {
    constexpr int kRowsPerBlock = detail::kMatvecWarps;
    const dim3 grid(unsigned((w.n_rows + kRowsPerBlock - 1) / kRowsPerBlock), 1);
    detail::clear_last_error();
    detail::matvec_kernel<D, 1, 1>
        <<<grid, detail::kMatvecWarps * 32, 0, stream>>>(wp, w.row_stride, w.n_rows, n_cols, x, 1, x_aligned, y);
  } else {
    constexpr int kRowsPerBlock = detail::kMatvecWarps;
    const dim3 grid(unsigned((w.n_rows + kRowsPerBlock - 1) / kRowsPerBlock),
                    unsigned((n_tokens + kMatmulTokens - 1) / kMatmulTokens));
    detail::clear_last_error();
    detail::matvec_kernel<D, 1, kMatmulTokens>
        <<<grid, detail::kMatvecWarps * 32, 0, stream>>>(wp, w.row_stride, w.n_rows, n_cols, x, n_tokens, x_aligned, y);
  }
  SLUICE_CUDA_CHECK_LAUNCH(what.c_str());
}

void dispatch(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, Stream& stream) {
  if (w.n_rows < 0 || w.n_cols <= 0 || n_tokens < 0)
    throw Error(ErrorCode::invalid_argument, "matvec: bad shape " + std::to_string(w.n_rows) + " x " +
                                                 std::to_string(w.n_cols) + ", " + std::to_string(n_tokens) +
                                                 " tokens");
  // Unit indices are 32-bit; grid.y counts token groups (at most 65535).
  if (w.n_cols > INT_MAX / 2 || w.n_rows > (int64_t(1) << 31) ||
      (n_tokens + kMatmulTokens - 1) / kMatmulTokens > 65535)
    throw Error(ErrorCode::invalid_argument, "matvec: shape " + std::to_string(w.n_rows) + " x " +
                                                 std::to_string(w.n_cols) + " with " + std::to_string(n_tokens) +
                                                 " tokens exceeds the CUDA kernel's limits");
  if (w.n_rows == 0 || n_tokens == 0) return;
  if (!w.data || !x || !y) throw Error(ErrorCode::invalid_argument, "matvec: null device pointer");
  const auto s = static_cast<cudaStream_t>(stream.handle());
  switch (w.type) {
    case GgmlType::F32: return launch<dq::F32>(w, x, n_tokens, y, s);
    case GgmlType::F16: return launch<dq::F16>(w, x, n_tokens, y, s);
    case GgmlType::BF16: return launch<dq::BF16>(w, x, n_tokens, y, s);
    case GgmlType::Q4_0: return launch<dq::Q4_0>(w, x, n_tokens, y, s);
    case GgmlType::Q4_1: return launch<dq::Q4_1>(w, x, n_tokens, y, s);
    case GgmlType::Q5_0: return launch<dq::Q5_0>(w, x, n_tokens, y, s);
    case GgmlType::Q5_1: return launch<dq::Q5_1>(w, x, n_tokens, y, s);
    case GgmlType::Q8_0: return launch<dq::Q8_0>(w, x, n_tokens, y, s);
    case GgmlType::MXFP4: return launch<dq::MXFP4>(w, x, n_tokens, y, s);
    case GgmlType::IQ4_NL: return launch<dq::IQ4_NL>(w, x, n_tokens, y, s);
    case GgmlType::Q2_K: return launch<dq::Q2_K>(w, x, n_tokens, y, s);
    case GgmlType::Q3_K: return launch<dq::Q3_K>(w, x, n_tokens, y, s);
    case GgmlType::Q4_K: return launch<dq::Q4_K>(w, x, n_tokens, y, s);
    case GgmlType::Q5_K: return launch<dq::Q5_K>(w, x, n_tokens, y, s);
    case GgmlType::Q6_K: return launch<dq::Q6_K>(w, x, n_tokens, y, s);
    case GgmlType::IQ1_S: return launch<dq::IQ1_S>(w, x, n_tokens, y, s);
    case GgmlType::IQ1_M: return launch<dq::IQ1_M>(w, x, n_tokens, y, s);
    case GgmlType::IQ2_XXS: return launch<dq::IQ2_XXS>(w, x, n_tokens, y, s);
    case GgmlType::IQ2_XS: return launch<dq::IQ2_XS>(w, x, n_tokens, y, s);
    case GgmlType::IQ2_S: return launch<dq::IQ2_S>(w, x, n_tokens, y, s);
    case GgmlType::IQ3_XXS: return launch<dq::IQ3_XXS>(w, x, n_tokens, y, s);
    case GgmlType::IQ3_S: return launch<dq::IQ3_S>(w, x, n_tokens, y, s);
    case GgmlType::IQ4_XS: return launch<dq::IQ4_XS>(w, x, n_tokens, y, s);
    case GgmlType::TQ1_0: return launch<dq::TQ1_0>(w, x, n_tokens, y, s);
    case GgmlType::TQ2_0: return launch<dq::TQ2_0>(w, x, n_tokens, y, s);
    default:
      throw Error(ErrorCode::unsupported, "type " + type_label(w.type) + " has no CUDA matvec kernel");
  }
}

}  // namespace

bool is_supported(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ4_XS:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0:
      return true;
    default:
      return false;
  }
}

void matvec(const DeviceMatrix& w, const float* x, float* y, Stream& stream) { dispatch(w, x, 1, y, stream); }

void matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, Stream& stream) {
  dispatch(w, x, n_tokens, y, stream);
}

}  // namespace sluice::kernels::cuda
