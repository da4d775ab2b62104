#include "common/error.h"

namespace sluice {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_file: return "invalid_file";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::io_error: return "io_error";
    case ErrorCode::corrupt_data: return "corrupt_data";
    case ErrorCode::budget: return "budget";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

}  // namespace sluice
