// The ggml tensor types, as numbered in GGUF files, with their block geometry.
//
// A quantized type stores values in blocks: `block_size` consecutive values along ne[0]
// occupy `type_size` bytes. A row of n values therefore takes n / block_size * type_size bytes,
// and n must be a multiple of block_size. Ids that ggml has removed (4, 5, 31-33, 36-38) are
// known here so that files using them get a precise "removed type" error.
//
// This table describes every type so that any GGUF can be inspected; which types the kernels
// can compute on is a separate question (kernels::is_supported).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // as ggml spells it: "f32", "q4_K", "mxfp4"
  uint32_t block_size;    // values per block
  uint32_t type_size;     // bytes per block
};

// Traits for a raw id read from a file; nullopt for unknown or removed ids.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t raw_id);
// Traits for a known type (never fails).
const GgmlTypeTraits& ggml_traits(GgmlType type);
// True when ggml once used the id and has since removed it (Q4_2, Q4_0_4_4, ...).
bool ggml_type_removed(uint32_t raw_id);
std::string_view ggml_type_name(GgmlType type);
// "q4_K" / "Q4_K" -> Q4_K; nullopt when unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of a row of n values (n must be a multiple of the block size; checked by callers).
inline uint64_t ggml_row_bytes(GgmlType type, uint64_t n) {
  const GgmlTypeTraits& t = ggml_traits(type);
  return n / t.block_size * t.type_size;
}

}  // namespace sluice
