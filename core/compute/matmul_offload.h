// MatmulOffload: a hook that lets another compute tier take weight products off the CPU.
//
// Session::matmul is the single place where a weight matrix meets activations. When a Session
// has an offload set (Session::set_matmul_offload), every product is offered to it first:
//   try_matmul(w, x, n, y)  computes Y[t][w.n_rows] = W X[t][w.n_cols] for t < n and returns
//                           true, or returns false without touching y, and the CPU computes it.
// `w` is the same view the CPU kernels would get (host pointer, type, shape); an offload
// recognises the weights by their host address (resident tensors) or by what it was told about
// the pinned routed experts (core/experts/tracked_expert_source.h). Without an offload the CPU path is
// unchanged, bit for bit.
//
// An offload computes with its own numerics (core/gpu/gpu_tier.h says how they differ), so a run
// with one gives the same greedy tokens, not bit-identical logits.
#pragma once

#include <cstdint>

#include "kernels/matvec.h"

namespace sluice::core {

class MatmulOffload {
 public:
  virtual ~MatmulOffload() = default;
  virtual bool try_matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y) = 0;
};

}  // namespace sluice::core
