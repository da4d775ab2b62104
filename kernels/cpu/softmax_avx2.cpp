// softmax's body built with -mavx2 -mfma (see CMakeLists.txt); chosen at run time by softmax.cpp.
#include <cmath>
#include <limits>
#include <span>

#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels::fma_impl {
#include "kernels/cpu/softmax_impl.h"

void softmax(std::span<float> x, float scale) { softmax_impl(x, scale); }

}  // namespace sluice::kernels::fma_impl
