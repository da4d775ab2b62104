// Public quantization API: validates the type and forwards to the CPU dispatch table.
#include "kernels/quant.h"

#include <string>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"

namespace sluice::kernels {
namespace {

[[noreturn]] void fail_unsupported(GgmlType type, std::string_view what) {
  throw Error(ErrorCode::unsupported,
              "type " + std::string(ggml_type_name(type)) + " has no " + std::string(what) + " kernel");
}

// Table index for a type; ids past the table (never produced by ggml_type_traits) fail cleanly.
size_t slot(GgmlType type, std::string_view what) {
  const auto i = static_cast<size_t>(type);
  if (i >= cpu::kTypeSlots) fail_unsupported(type, what);
  return i;
}

}  // namespace

GgmlType vec_dot_type(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::F32: return GgmlType::F32;
    case GgmlType::F16: return GgmlType::F16;
    case GgmlType::BF16: return GgmlType::BF16;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL: return GgmlType::Q8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0: return GgmlType::Q8_K;
    default: fail_unsupported(weight_type, "dot product");
  }
}

void dequantize_row(GgmlType type, const std::byte* src, float* dst, int64_t n) {
  const auto fn = cpu::best_kernels().dequantize[slot(type, "dequantize")];
  if (!fn) fail_unsupported(type, "dequantize");
  fn(src, dst, n);
}

void quantize_row(GgmlType type, const float* src, std::byte* dst, int64_t n) {
  const auto fn = cpu::best_kernels().quantize[slot(type, "quantize")];
  if (!fn) fail_unsupported(type, "quantize");
  fn(src, dst, n);
}

float vec_dot(GgmlType weight_type, const std::byte* weight_row, const std::byte* act, int64_t n) {
  const auto fn = cpu::best_kernels().vec_dot[slot(weight_type, "dot product")];
  if (!fn) fail_unsupported(weight_type, "dot product");
  return fn(weight_row, act, n);
}

}  // namespace sluice::kernels
