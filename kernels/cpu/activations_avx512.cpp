// silu/swiglu's 16-value blocks with ggml's own AVX-512 ggml_v_expf: the same instructions in the
// same order as ggml_v_silu and ggml_vec_swiglu_f32 on the reference build, lane for lane what
// cpu/expf_ggml.h emulates in scalar code (scalef is j * 2^n rounded once, as the emulation's
// exact product or ldexp). No product here feeds an add, so nothing can be contracted.
#include "kernels/cpu/avx512_common.h"

#include <cmath>
#include <cstddef>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf_avx512.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

// x / (1 + expf(-x)), as ggml_v_silu.
inline __m512 silu16(__m512 x) {
  const __m512 e = ggml_v_expf(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace

void silu_blocks(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(x + i)));
}

void swiglu_blocks(const float* gate, const float* up, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
}

}  // namespace sluice::kernels::cpu::avx512
