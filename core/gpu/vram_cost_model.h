// VramCostModel: on a VRAM miss of a routed expert, copy it up and compute on the GPU, or
// compute it on the CPU from the host arena?
//
// For one expert (gate + up + down, `bytes` of weights) used by `n_tokens` tokens of a batch:
//   copy up:  bytes / h2d  +  bytes / gpu  +  copy_latency
//             (the copy dominates; the GPU product reads the weights once for all tokens)
//   CPU:      n_tokens * bytes / cpu
//             (a CPU matvec streams every weight byte once per token: quantized kernels dot
//             each row with each token's activations, so time grows with the tokens)
// and copies up when that is not slower. The rates are measured at start-up (GpuTier): `h2d`
// from timed copies out of page-locked memory, `cpu` from a timed one-token product of a
// resident matrix with the session's thread pool, `gpu` from the device's peak bandwidth.
//
// Since both sides scale with `bytes`, the choice is mostly a token threshold
// (n_tokens > cpu / h2d + ...): decode (one token) copies up only where the bus beats the CPU,
// prefill batches almost always do. A copied-up expert also stays in the VRAM cache for later
// tokens; the model does not credit that reuse, so it errs towards the CPU.
//
// Products of weights already in VRAM go to the GPU unless the matrix is so small that the CPU
// finishes before the activations' round trip (copy_latency) would.
//
// Plain C++, no CUDA: tests exercise it without a GPU.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::core {

struct TierRates {
  double h2d_bytes_per_s = 0;  // host -> device, page-locked source
  double cpu_bytes_per_s = 0;  // weight bytes per second of a one-token CPU product
  double gpu_bytes_per_s = 0;  // weight bytes per second of a GPU product (0: ignored)
  double copy_latency_s = 20e-6;  // fixed cost of a GPU round trip (launches, copies, synchronize); never measured
};

class VramCostModel {
 public:
  // Error(invalid_argument) when h2d or cpu is not a positive rate.
  explicit VramCostModel(const TierRates& rates);

  double copy_up_seconds(uint64_t bytes) const;
  double cpu_seconds(uint64_t bytes, int64_t n_tokens) const;
  bool copy_up(uint64_t bytes, int64_t n_tokens) const { return copy_up_seconds(bytes) <= cpu_seconds(bytes, n_tokens); }
  // For weights already in VRAM: is a GPU product (a round trip of activations, copy_latency)
  // faster than the CPU's? False for small matrices such as MLA's per-head slices.
  bool gpu_product(uint64_t bytes, int64_t n_tokens) const;
  const TierRates& rates() const { return rates_; }
  // "H2D 24.1 GB/s, CPU matvec 18.3 GB/s, GPU 3200 GB/s: copy up from 2 tokens per expert"
  std::string describe(uint64_t typical_bytes) const;

 private:
  TierRates rates_;
};

}  // namespace sluice::core
