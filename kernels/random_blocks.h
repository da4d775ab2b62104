// Weight rows of random bits for kernel tests and benchmarks, with every scale field finite.
//
// Every bit of the packed quants, grid indices, signs and sub-block scales is random, so each
// code path of a kernel is exercised; the f16 / E8M0 super-block scales are replaced by small
// finite values (1e-4 .. 0.1), so results are finite and no denormal slows a timing. The same
// (type, n, seed) gives the same bytes. Used where a type has no weight quantizer (the i-quants,
// TQ1_0, TQ2_0) and by the SIMD-against-scalar tests of every block type.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/ggml_type.h"

namespace sluice::kernels {

// Fills ggml_row_bytes(type, n) bytes at dst. n must be a multiple of the block size; type a
// block type the kernels support (throws Error(unsupported) otherwise).
void fill_random_blocks(GgmlType type, int64_t n, uint32_t seed, std::byte* dst);

// Whether quantize_row has a weight quantizer for this type (the i-quants and TQ1_0/TQ2_0 have none).
bool has_weight_quantizer(GgmlType type);

}  // namespace sluice::kernels
