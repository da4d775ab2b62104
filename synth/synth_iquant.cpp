// Random blocks for the i-quants and ternary types in synth (see synth/synth_quant.h).
//
// sluice has no weight quantizer for these types (ggml's searches a codebook with an importance
// matrix), and synth never materializes f32 weights anyway: kernels::fill_random_blocks gives
// blocks whose codes, signs and sub-block scales are random and valid; the block's super-scale d
// is then set so the dequantized values have the requested standard deviation. The values' rms
// for d = 1 is a property of the type (random codes), measured once per type by dequantizing
// random blocks with ggml's own to_float.
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "synth/synth_quant.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"

namespace sluice::core::synth {

namespace {

// Where a block keeps its f16 super-scale d; -1 for IQ1_M, which spreads it over the top nibbles
// of its four 16-bit scale words.
int d_offset(GgmlType type) {
  switch (type) {
    case GgmlType::IQ1_S: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::IQ4_XS: case GgmlType::IQ4_NL:
      return 0;
    case GgmlType::TQ1_0: case GgmlType::TQ2_0:
      return static_cast<int>(ggml_traits(type).type_size) - 2;
    default:
      return -1;
  }
}

constexpr size_t kIq1mScalesOffset = 256 / 8 + 256 / 16;  // block_iq1_m: qs[32] | qh[16] | scales[8]

void set_scale(GgmlType type, std::byte* block, uint16_t d) {
  if (type == GgmlType::IQ1_M) {
    uint16_t sc[4];
    std::memcpy(sc, block + kIq1mScalesOffset, 8);
    for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>((sc[k] & 0x0fff) | (((d >> (4 * k)) & 0xf) << 12));
    std::memcpy(block + kIq1mScalesOffset, sc, 8);
  } else {
    std::memcpy(block + d_offset(type), &d, 2);
  }
}

// rms of the dequantized values of random blocks whose super-scale is 1.
double unit_rms(GgmlType type) {
  const GgmlTypeTraits& tr = ggml_traits(type);
  constexpr int64_t kBlocks = 256;
  std::vector<std::byte> blocks(kBlocks * tr.type_size);
  kernels::fill_random_blocks(type, kBlocks * tr.block_size, 0x1D0u, blocks.data());
  for (int64_t b = 0; b < kBlocks; ++b) set_scale(type, blocks.data() + b * tr.type_size, f32_to_f16(1.0f));
  std::vector<float> v(static_cast<size_t>(kBlocks * tr.block_size));
  kernels::dequantize_row(type, blocks.data(), v.data(), static_cast<int64_t>(v.size()));
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  return std::sqrt(ss / static_cast<double>(v.size()));
}

}  // namespace

bool is_random_block_type(GgmlType type) { return type == GgmlType::IQ1_M || d_offset(type) >= 0; }

void fill_random_blocks_scaled(GgmlType type, Rng& rng, float std, std::span<std::byte> dst) {
  if (!is_random_block_type(type))
    throw Error(ErrorCode::unsupported, "synth cannot generate " + std::string(ggml_traits(type).name) + " blocks");
  const GgmlTypeTraits& tr = ggml_traits(type);
  static std::mutex mu;
  static double rms[64] = {};
  double unit;
  {
    std::lock_guard lock(mu);
    double& r = rms[static_cast<size_t>(type) % 64];
    if (r == 0) r = unit_rms(type);
    unit = r;
  }
  const size_t n_blocks = dst.size() / tr.type_size;
  kernels::fill_random_blocks(type, static_cast<int64_t>(n_blocks * tr.block_size), static_cast<uint32_t>(rng.next()),
                              dst.data());
  const uint16_t d = f32_to_f16(static_cast<float>(std / unit));
  for (size_t b = 0; b < n_blocks; ++b) set_scale(type, dst.data() + b * tr.type_size, d);
}

}  // namespace sluice::core::synth
