#include "tools/verify_flag.h"

#include "common/error.h"

namespace sluice::tools {

void apply_verify_flag(const std::string& value, core::EngineOptions& options) {
  if (value != "on" && value != "off" && value != "require") {
    throw Error(ErrorCode::invalid_argument, "--verify '" + value + "' must be on, off or require");
  }
  options.verify = value != "off";
  options.require_index = value == "require";
}

}  // namespace sluice::tools
