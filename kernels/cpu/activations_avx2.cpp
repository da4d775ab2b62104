// silu/swiglu's ggml_v_expf blocks built with -mavx2 -mfma (see activations_impl.h).
#include <cstddef>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/expf_ggml.h"

namespace sluice::kernels::cpu::avx2 {
#include "kernels/cpu/activations_impl.h"

void silu_blocks(const float* x, float* y, size_t n) { silu_blocks_impl(x, y, n); }
void swiglu_blocks(const float* gate, const float* up, float* y, size_t n) { swiglu_blocks_impl(gate, up, y, n); }

}  // namespace sluice::kernels::cpu::avx2
