// Host launcher of rms_norm.
#include <string>

#include "common/error.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rms_norm.cuh"

namespace sluice::kernels::cuda {

void rms_norm(const float* x, const float* weight, float eps, int64_t n, int64_t n_rows, float* y,
              Stream& stream) {
  if (n <= 0 || n_rows < 0 || n_rows > int64_t(0x7fffffff))
    throw Error(ErrorCode::invalid_argument,
                "rms_norm: bad shape " + std::to_string(n_rows) + " rows of " + std::to_string(n));
  if (n_rows == 0) return;
  if (!x || !y) throw Error(ErrorCode::invalid_argument, "rms_norm: null device pointer");
  detail::clear_last_error();
  detail::rms_norm_kernel<<<unsigned(n_rows), detail::kRmsNormThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      x, weight, eps, n, y);
  SLUICE_CUDA_CHECK_LAUNCH("rms_norm");
}

}  // namespace sluice::kernels::cuda
