// Random weight blocks with finite scales (kernels/random_blocks.h).
#include "kernels/random_blocks.h"

#include <cstring>
#include <random>
#include <string>

#include "common/error.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/blocks_iq.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/quant.h"

namespace sluice::kernels {
namespace {

// Byte offsets of a block's f16 scale fields; -1 ends the list.
struct HalfFields {
  int at[2] = {-1, -1};
};

HalfFields half_fields(GgmlType type) {
  using cpu::BlockQ2_K, cpu::BlockQ3_K, cpu::BlockQ6_K, cpu::BlockTq1_0, cpu::BlockTq2_0;
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_S: return {{0, -1}};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {{0, 2}};
    case GgmlType::Q2_K: return {{int(offsetof(BlockQ2_K, d)), int(offsetof(BlockQ2_K, dmin))}};
    case GgmlType::Q3_K: return {{int(offsetof(BlockQ3_K, d)), -1}};
    case GgmlType::Q6_K: return {{int(offsetof(BlockQ6_K, d)), -1}};
    case GgmlType::TQ1_0: return {{int(offsetof(BlockTq1_0, d)), -1}};
    case GgmlType::TQ2_0: return {{int(offsetof(BlockTq2_0, d)), -1}};
    default: return {};
  }
}

}  // namespace

bool has_weight_quantizer(GgmlType type) {
  const auto i = static_cast<size_t>(type);
  return is_supported(type) && i < cpu::kTypeSlots && cpu::scalar_kernels().quantize[i] != nullptr;
}

void fill_random_blocks(GgmlType type, int64_t n, uint32_t seed, std::byte* dst) {
  if (!is_supported(type) || ggml_traits(type).block_size == 1)
    throw Error(ErrorCode::unsupported, "no random blocks for type " + std::string(ggml_type_name(type)));
  const auto& traits = ggml_traits(type);
  std::mt19937 rng(seed);
  const size_t bytes = ggml_row_bytes(type, uint64_t(n));
  for (size_t b = 0; b < bytes; ++b) dst[b] = std::byte(rng() & 0xff);
  auto small_half = [&] { return cpu::f32_to_fp16(float(rng() % 1000 + 1) * 1e-4f); };
  const HalfFields fields = half_fields(type);
  for (int64_t i = 0; i < n / int64_t(traits.block_size); ++i) {
    std::byte* block = dst + size_t(i) * traits.type_size;
    for (int at : fields.at) {
      if (at < 0) continue;
      const uint16_t h = small_half();
      std::memcpy(block + at, &h, 2);
    }
    if (type == GgmlType::MXFP4) {
      block[0] = std::byte(110 + rng() % 20);
    } else if (type == GgmlType::IQ1_M) {
      // The f16 scale lives in the top nibble of each of the four scale words.
      const uint16_t h = small_half();
      uint16_t sc[4];
      std::memcpy(sc, block + offsetof(cpu::BlockIq1M, scales), 8);
      for (int k = 0; k < 4; ++k) sc[k] = uint16_t((sc[k] & 0x0fff) | (((h >> (4 * k)) & 0xf) << 12));
      std::memcpy(block + offsetof(cpu::BlockIq1M, scales), sc, 8);
    }
  }
}

}  // namespace sluice::kernels
