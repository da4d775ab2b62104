// Host launcher of attention: shape checks, then one block per (head, token).
#include <string>

#include "common/error.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/ops.h"

namespace sluice::kernels::cuda {

void attention(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_tokens, int64_t start_pos, float* out, Stream& stream) {
  auto fail = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "attention: " + what); };
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0)
    fail(std::to_string(s.n_head) + " query heads do not split over " + std::to_string(s.n_head_kv) + " KV heads");
  if (s.k_len <= 0 || s.k_len > detail::kAttnMaxK)
    fail("key length " + std::to_string(s.k_len) + " outside 1.." + std::to_string(detail::kAttnMaxK));
  if (s.v_len <= 0 || s.v_len > detail::kAttnMaxV)
    fail("value length " + std::to_string(s.v_len) + " outside 1.." + std::to_string(detail::kAttnMaxV));
  if (n_tokens < 0 || n_tokens > 65535 || start_pos < 0 || s.n_head > 0x7fffffff)
    fail(std::to_string(n_tokens) + " tokens at position " + std::to_string(start_pos) +
         " outside the kernel's grid (at most 65535 tokens per call)");
  if (n_tokens == 0) return;
  if (!q || !k_cache || !v_cache || !out) fail("null device pointer");
  const dim3 grid(unsigned(s.n_head), unsigned(n_tokens));
  const size_t smem = size_t(s.k_len) * sizeof(float);
  detail::clear_last_error();
  detail::attention_kernel<<<grid, detail::kAttnThreads, smem, static_cast<cudaStream_t>(stream.handle())>>>(
      s, q, k_cache, v_cache, start_pos, out);
  SLUICE_CUDA_CHECK_LAUNCH("attention");
}

}  // namespace sluice::kernels::cuda
