// The routing flags `sluice run` and `sluice bench` share:
//   --trace-out FILE    the experts chosen per token per MoE layer (shared/traces format)
//   --profile-out FILE  expert-use counts of this run (the profile format of cache/trace.h)
//   --warm PROFILE      preload the profile's most-used experts before the first token
// Output paths are checked for writability before the model loads, so a long run cannot end
// in a failed write.
#pragma once

#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "app/trace_recorder.h"

namespace sluice::tools {

void add_routing_options(cxxopts::Options& options);

class RoutingOutputs {
 public:
  RoutingOutputs(const cxxopts::ParseResult& args, const std::string& model_path);
  // Null when neither --trace-out nor --profile-out was given.
  core::TraceRecorder* recorder() { return recorder_ ? &*recorder_ : nullptr; }
  const std::string& warm_profile() const { return warm_; }
  // Writes the trace and/or profile; prints one line per file on stderr.
  void write(const char* command) const;

 private:
  std::optional<core::TraceRecorder> recorder_;
  std::string trace_out_, profile_out_, warm_;
};

// The line printed after a warm start: experts, bytes, seconds, GB/s.
std::string describe_warm(uint64_t shards, uint64_t bytes, double seconds);

}  // namespace sluice::tools
