// sluice bench kernels --gpu: CUDA matvec GB/s per weight type against the HBM peak and a
// measured device-to-device copy. Lives apart from the CPU benchmark so that file stays
// CUDA-free; in a build without CUDA it throws Error(unsupported).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/ggml_type.h"

namespace sluice::tools {

struct GpuBenchOptions {
  std::vector<GgmlType> types;
  int64_t n_cols = 4096;
  size_t target_bytes = size_t(256) << 20;  // per type: far above any GPU's L2
  int iterations = 20;                      // timed calls after the warm-up
};

// Prints one table; throws Error(unsupported) without CUDA support or a device.
void bench_kernels_gpu(const GpuBenchOptions& options);

}  // namespace sluice::tools
