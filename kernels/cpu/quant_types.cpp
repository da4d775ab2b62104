// Which weight types the kernels support: a plain table with no dispatch behind it, so code that
// only validates a file (the GGUF fuzz target, model checks) links without the kernels.
#include <string>

#include "common/error.h"
#include "kernels/quant.h"

namespace sluice::kernels {

bool is_supported(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0: return true;
    default: return false;
  }
}

void require_supported(GgmlType type, std::string_view tensor_name) {
  if (is_supported(type)) return;
  throw Error(ErrorCode::unsupported, "type " + std::string(ggml_type_name(type)) +
                                          " not supported yet (tensor '" + std::string(tensor_name) + "')");
}

}  // namespace sluice::kernels
