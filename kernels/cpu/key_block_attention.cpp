// The key-block attention kernels' scalar level (key_block_attention_impl.h) and the public entry
// points, which go through the dispatch table.
#include "kernels/key_block_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"
#include "kernels/cpu/scalar.h"

namespace sluice::kernels {

namespace cpu {
namespace {
inline void widen16(const uint16_t* src, float* dst) {
  for (int c = 0; c < 16; ++c) dst[c] = fp16_to_f32(src[c]);
}
inline void narrow16(const float* src, uint16_t* dst) {
  for (int c = 0; c < 16; ++c) dst[c] = f32_to_fp16(src[c]);
}
#include "kernels/cpu/key_block_attention_impl.h"
}  // namespace

KeyBlockKernels scalar_key_block_kernels() {
  return {decompress_key_blocks_impl, decompress_value_rows_impl, key_block_scores_impl, softmax_chunk_impl,
          add_weighted_value_rows_impl};
}
}  // namespace cpu

void decompress_key_blocks(const float* lt, int64_t n_blocks, int64_t n_in, const float* wt, size_t wt_stride,
                           int64_t d, uint16_t* kt, size_t kt_block_stride) {
  cpu::best_kernels().key_blocks.decompress_keys(lt, n_blocks, n_in, wt, wt_stride, d, kt, kt_block_stride);
}

void decompress_value_rows(const float* lt, int64_t n_cells, int64_t n_in, const float* wt, size_t wt_stride,
                           int64_t d, uint16_t* v, size_t v_stride) {
  cpu::best_kernels().key_blocks.decompress_values(lt, n_cells, n_in, wt, wt_stride, d, v, v_stride);
}

void key_block_scores(const uint16_t* kt, size_t kt_block_stride, int64_t n_blocks, int64_t d,
                      std::span<const float* const> q, float scale, std::span<float* const> out) {
  cpu::best_kernels().key_blocks.scores(kt, kt_block_stride, n_blocks, d, q.data(),
                                        int(std::min(q.size(), out.size())), scale, out.data());
}

float softmax_chunk(std::span<float> s, float& max, std::span<float, 16> lanes) {
  return cpu::best_kernels().key_blocks.softmax_chunk(s.data(), int64_t(s.size()), &max, lanes.data());
}

float reduce_key_block_lanes(std::span<const float, 16> lanes) { return detail::reduce_add_16(lanes.data()); }

void add_weighted_value_rows(const uint16_t* v, size_t v_stride, int64_t n_cells, int64_t d,
                             std::span<const float* const> w, std::span<float* const> out) {
  cpu::best_kernels().key_blocks.add_weighted(v, v_stride, n_cells, d, w.data(), int(std::min(w.size(), out.size())),
                                              out.data());
}

}  // namespace sluice::kernels
