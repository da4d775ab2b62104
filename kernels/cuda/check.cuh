// Error checking for CUDA runtime calls inside kernels/cuda/*.cu (internal to this folder).
//
// SLUICE_CUDA_CHECK(cudaMalloc(&p, n)) throws sluice::Error(internal) naming the call as written
// and cudaGetErrorString's text, e.g. "cudaMalloc(&p, bytes) failed: out of memory (2)".
// SLUICE_CUDA_CHECK_LAUNCH("matvec q4_K") checks cudaGetLastError right after a <<<...>>> launch
// (bad configurations surface there, not at the next synchronization); launchers call
// detail::clear_last_error() just before the launch, so an earlier failed call whose error was
// already reported (e.g. a refused cudaMalloc, which also sets the "last error") is not blamed on
// the kernel. Failed checked calls clear it too.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/error.h"

namespace sluice::kernels::cuda::detail {

inline void clear_last_error() { (void)cudaGetLastError(); }

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* suffix) {
  clear_last_error();  // reported here; sticky errors (a faulted context) stay sticky regardless
  throw Error(err == cudaErrorMemoryAllocation ? ErrorCode::budget : ErrorCode::internal,
              std::string(what) + suffix + ": " + cudaGetErrorString(err) + " (" + std::to_string(int(err)) +
                  ")");
}

}  // namespace sluice::kernels::cuda::detail

#define SLUICE_CUDA_CHECK(call)                                                                   \
  do {                                                                                            \
    const cudaError_t sluice_cuda_err_ = (call);                                                  \
    if (sluice_cuda_err_ != cudaSuccess)                                                          \
      ::sluice::kernels::cuda::detail::throw_cuda_error(sluice_cuda_err_, #call, " failed");      \
  } while (0)

#define SLUICE_CUDA_CHECK_LAUNCH(name)                                                            \
  do {                                                                                            \
    const cudaError_t sluice_cuda_err_ = cudaGetLastError();                                      \
    if (sluice_cuda_err_ != cudaSuccess)                                                          \
      ::sluice::kernels::cuda::detail::throw_cuda_error(sluice_cuda_err_, "launch of ", name);    \
  } while (0)
