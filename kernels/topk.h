// top_k: indices of the k largest values, largest first (ggml_top_k / argsort descending).
// Ties go to the lower index. NaN compares as smaller than everything. out.size() = k <= x.size().
// No allocation: a partial selection sort, which is what k << n (experts, groups) wants.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::kernels {

void top_k(std::span<const float> x, std::span<int32_t> out);

}  // namespace sluice::kernels
