// Dequantizers of the float weight types (F32, F16, BF16): one value per "block", so rows of any
// length work and a warp's loads are contiguous. Contract: dequant_common.cuh.
#pragma once

#include "kernels/cuda/dequant_common.cuh"

namespace sluice::kernels::cuda::dq {

struct F32 {
  static constexpr int kQK = 1, kBytes = 4, kRun = 1, kAlign = 4;
  SLUICE_HD static void run(const uint8_t* b, int /*j*/, float* out) {
#if defined(__CUDA_ARCH__)
    out[0] = *reinterpret_cast<const float*>(b);
#else
    std::memcpy(out, b, 4);
#endif
  }
};

struct F16 {
  static constexpr int kQK = 1, kBytes = 2, kRun = 1, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int /*j*/, float* out) { out[0] = fp16_to_f32(load_u16(b)); }
};

struct BF16 {
  static constexpr int kQK = 1, kBytes = 2, kRun = 1, kAlign = 2;
  SLUICE_HD static void run(const uint8_t* b, int /*j*/, float* out) { out[0] = bf16_to_f32(load_u16(b)); }
};

}  // namespace sluice::kernels::cuda::dq
