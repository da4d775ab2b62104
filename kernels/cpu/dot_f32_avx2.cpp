// dot_f32 bodies built with -mavx2 -mfma (see CMakeLists.txt); chosen at run time.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/expf_ggml.h"
#include "kernels/dot_f32.h"
#include "kernels/quant.h"

namespace sluice::kernels::fma_impl {
#include "kernels/cpu/dot_f32_impl.h"
}  // namespace sluice::kernels::fma_impl
