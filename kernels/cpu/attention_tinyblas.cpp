// The scalar level's tinyBLAS-order attention products (attention_tinyblas_*_impl.h), plain build.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels::cpu {

namespace {
inline float widen_one(uint16_t h) { return fp16_to_f32(h); }
void widen_f16(const uint16_t* src, float* dst, int64_t m) {
  for (int64_t i = 0; i < m; ++i) dst[i] = fp16_to_f32(src[i]);
}
}  // namespace

#include "kernels/cpu/attention_tinyblas_scores_impl.h"
#include "kernels/cpu/attention_tinyblas_values_impl.h"

}  // namespace sluice::kernels::cpu
