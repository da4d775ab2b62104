#include "tools/routing_outputs.h"

#include <cstdio>
#include <fstream>

#include "cache/trace.h"
#include "common/error.h"
#include "common/units.h"

namespace sluice::tools {

namespace {
void check_writable(const std::string& path, const char* flag) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  if (!out) throw Error(ErrorCode::invalid_argument, std::string(flag) + ": cannot write '" + path + "'");
}

void write_text(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw Error(ErrorCode::io_error, std::string(flag) + ": cannot write '" + path + "'");
}
}  // namespace

void add_routing_options(cxxopts::Options& options) {
  options.add_options()
      ("trace-out", "record the experts chosen per token per MoE layer to FILE (routing trace)", cxxopts::value<std::string>())
      ("profile-out", "write this run's expert-use profile to FILE (for --warm)", cxxopts::value<std::string>())
      ("warm", "preload the most-used experts of PROFILE (from --profile-out or sluice tune) before the first token",
       cxxopts::value<std::string>());
}

RoutingOutputs::RoutingOutputs(const cxxopts::ParseResult& args, const std::string& model_path) {
  if (args.count("trace-out")) trace_out_ = args["trace-out"].as<std::string>();
  if (args.count("profile-out")) profile_out_ = args["profile-out"].as<std::string>();
  if (args.count("warm")) warm_ = args["warm"].as<std::string>();
  if (!trace_out_.empty()) check_writable(trace_out_, "--trace-out");
  if (!profile_out_.empty()) check_writable(profile_out_, "--profile-out");
  if (!trace_out_.empty() || !profile_out_.empty()) recorder_.emplace(model_path);
}

void RoutingOutputs::write(const char* command) const {
  if (!recorder_) return;
  cache::Trace trace = recorder_->trace();
  if (!trace_out_.empty()) {
    write_text(trace_out_, cache::format_trace(trace), "--trace-out");
    std::fprintf(stderr, "sluice %s: routing trace of %zu sequence(s), %llu tokens written to %s\n", command,
                 trace.sequences.size(), static_cast<unsigned long long>(trace.n_tokens()), trace_out_.c_str());
  }
  if (!profile_out_.empty()) {
    write_text(profile_out_, cache::format_profile(cache::build_profile(trace)), "--profile-out");
    std::fprintf(stderr, "sluice %s: expert-use profile of %llu tokens written to %s\n", command,
                 static_cast<unsigned long long>(trace.n_tokens()), profile_out_.c_str());
  }
}

std::string describe_warm(uint64_t shards, uint64_t bytes, double seconds) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "warm start: %llu experts (%s) preloaded in %.2f s (%.2f GB/s)",
                static_cast<unsigned long long>(shards), human_bytes(bytes).c_str(), seconds,
                seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0);
  return buf;
}

}  // namespace sluice::tools
