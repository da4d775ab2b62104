// A one-line progress bar on stderr for long operations (indexing, synthesizing, warm start).
// Redraws at most ~10 times a second; prints nothing when stderr is not a terminal unless forced,
// so logs and tests stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::tools {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label, bool force = false);
  void update(uint64_t done, uint64_t total);
  void finish();

 private:
  std::string label_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace sluice::tools
