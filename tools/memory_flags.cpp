#include "tools/memory_flags.h"

#include "common/units.h"

namespace sluice::tools {

uint64_t parse_budget_flag(const std::string& text, uint64_t model_file_bytes) {
  if (!is_percent(text)) return parse_size(text, "--budget");
  return static_cast<uint64_t>(parse_percent(text, "--budget") * static_cast<double>(model_file_bytes));
}

double parse_cache_experts_flag(const std::string& text) {
  return parse_percent(is_percent(text) ? text : text + "%", "--cache-experts");
}

}  // namespace sluice::tools
