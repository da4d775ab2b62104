// Helpers of the GPU suites (tests/test_cuda_*.cpp): skipping without a device, moving vectors
// to and from the GPU, and the normalized MSE the kernels are judged by.
#pragma once

#if SLUICE_HAVE_CUDA

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/cuda/runtime.h"

namespace sluice::test {

// True (after a doctest MESSAGE) when there is no usable GPU: the caller returns, the case passes.
inline bool skip_without_gpu() {
  if (kernels::cuda::probe()) return false;
  MESSAGE("no CUDA device: skipped");
  return true;
}

template <class T>
kernels::cuda::DeviceBuffer to_device(std::span<const T> v, kernels::cuda::Stream& stream) {
  kernels::cuda::DeviceBuffer buf(v.size_bytes() == 0 ? 4 : v.size_bytes());
  kernels::cuda::copy_to_device(buf.data(), v.data(), v.size_bytes(), stream);
  stream.synchronize();
  return buf;
}

template <class T>
kernels::cuda::DeviceBuffer to_device(const std::vector<T>& v, kernels::cuda::Stream& stream) {
  return to_device(std::span<const T>(v), stream);
}

// Waits for the stream (surfacing any kernel fault) and copies n values back.
template <class T>
std::vector<T> to_host(const kernels::cuda::DeviceBuffer& buf, size_t n, kernels::cuda::Stream& stream) {
  std::vector<T> out(n);
  stream.synchronize();
  kernels::cuda::copy_to_host(out.data(), buf.data(), n * sizeof(T), stream);
  stream.synchronize();
  return out;
}

template <class T>
T* dev_ptr(const kernels::cuda::DeviceBuffer& buf) {
  return reinterpret_cast<T*>(buf.data());
}

// sum (got - want)^2 / sum want^2, in double; NaN anywhere gives NaN (fails every bound).
inline double nmse(std::span<const float> got, std::span<const float> want) {
  REQUIRE(got.size() == want.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    err += d * d;
    ref += double(want[i]) * double(want[i]);
  }
  return ref > 0 ? err / ref : err;
}

}  // namespace sluice::test

#endif  // SLUICE_HAVE_CUDA
