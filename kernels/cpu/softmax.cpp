#include "kernels/softmax.h"

#include <cmath>
#include <limits>
#include <span>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels {

namespace plain_impl {
#include "kernels/cpu/softmax_impl.h"
}  // namespace plain_impl

namespace fma_impl {
void softmax(std::span<float> x, float scale);  // softmax_avx2.cpp
}  // namespace fma_impl

void softmax(std::span<float> x, float scale) {
  if (cpu::have_avx2_fma()) fma_impl::softmax(x, scale);
  else plain_impl::softmax_impl(x, scale);
}

}  // namespace sluice::kernels
