// -t, -c and -b as every command that runs a model takes them, checked one way: a negative or
// absurd context (-c -1, -c 2147483647) or a batch below 1 is one line naming the flag and its
// range; more threads than this machine has CPUs are cut to that count with a note (a spinning
// worker without a core only slows the others).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>

namespace sluice::tools {

inline constexpr int64_t kMaxContext = int64_t{1} << 20;  // more than any model's training context
inline constexpr int64_t kMaxBatch = int64_t{1} << 16;

struct SessionFlags {
  unsigned threads = 1;
  int64_t n_ctx = 0;  // 0: the model's (at most 4096)
  int64_t n_batch = 512;
  std::vector<std::string> notes;  // one line each, for stderr
};

// Reads "threads" and "batch-size", and "ctx-size" when `has_ctx`.
SessionFlags read_session_flags(const cxxopts::ParseResult& args, bool has_ctx = true);

}  // namespace sluice::tools
