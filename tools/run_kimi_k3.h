// `sluice run` for kimi-k3 models: the same flags and output as tools/cmd_run.cpp, over
// core::KimiK3Model / KimiK3Session (hybrid KDA + MLA; its own state and forward pass).
#pragma once

#include <string>

#include <cxxopts.hpp>

namespace sluice::tools {

// True when the GGUF at `path` is a kimi-k3 model (reads the header only).
bool is_kimi_k3_file(const std::string& path);
// Runs generation with the already parsed and validated `sluice run` options.
int run_kimi_k3(const cxxopts::ParseResult& args);

}  // namespace sluice::tools
