// The memory flags that run, bench and serve share, parsed one way:
//   --budget SIZE         binary units (29G = 29 GiB, 512M) or a percentage of the model file
//   --cache-experts F     a share of all routed expert bytes, "25%" or "25"
#pragma once

#include <cstdint>
#include <string>

namespace sluice::tools {

uint64_t parse_budget_flag(const std::string& text, uint64_t model_file_bytes);
double parse_cache_experts_flag(const std::string& text);

}  // namespace sluice::tools
