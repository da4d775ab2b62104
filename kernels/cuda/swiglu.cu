// Host launcher of swiglu.
#include <algorithm>
#include <string>

#include "common/error.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/swiglu.cuh"

namespace sluice::kernels::cuda {

void swiglu(const float* gate, const float* up, int64_t n, float* y, Stream& stream) {
  if (n < 0) throw Error(ErrorCode::invalid_argument, "swiglu: negative length " + std::to_string(n));
  if (n == 0) return;
  if (!gate || !up || !y) throw Error(ErrorCode::invalid_argument, "swiglu: null device pointer");
  // Enough blocks to fill any GPU; the grid-stride loop covers the rest.
  const int64_t blocks = std::min<int64_t>((n + detail::kSwigluThreads - 1) / detail::kSwigluThreads, 65536);
  detail::clear_last_error();
  detail::swiglu_kernel<<<unsigned(blocks), detail::kSwigluThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      gate, up, n, y);
  SLUICE_CUDA_CHECK_LAUNCH("swiglu");
}

}  // namespace sluice::kernels::cuda
