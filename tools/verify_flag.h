// --verify, shared by every command that runs a model (run, bench, serve), parsed one way:
//   on       (default) check every landed shard against the model's index (`sluice index`);
//            no index: one notice line; a stale index (the model changed since): an error
//   off      no checks, nothing said
//   require  refuse to run without a current index
// core/gguf/shard_index.h (VerifyMode, index_for_run) says what the engine does with each.
//
//   options.add_options()(kVerifyFlag, kVerifyFlagHelp, cxxopts::value<std::string>()->default_value("on"));
//   apply_verify_flag(args["verify"].as<std::string>(), engine_options);
#pragma once

#include <string>

#include "core/engine.h"

namespace sluice::tools {

inline constexpr const char* kVerifyFlag = "verify";
inline constexpr const char* kVerifyFlagHelp =
    "check shards against the model's index (sluice index): on (a missing index is a notice, a stale one an "
    "error), off, or require (refuse to run without a current index)";

// Sets options.verify / options.require_index; Error(invalid_argument) names a bad value.
void apply_verify_flag(const std::string& value, core::EngineOptions& options);

}  // namespace sluice::tools
