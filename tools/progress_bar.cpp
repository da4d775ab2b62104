#include "tools/progress_bar.h"

#include <unistd.h>

#include <cstdio>

#include "common/units.h"

namespace sluice::tools {

ProgressBar::ProgressBar(std::string label, bool force)
    : label_(std::move(label)), enabled_(force || ::isatty(STDERR_FILENO)), start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  double secs = std::chrono::duration<double>(now - start_).count();
  double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  int filled = static_cast<int>(frac * 30);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(30, '.');
  double rate = secs > 0 ? static_cast<double>(done) / secs / 1e9 : 0;
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %s / %s  %.2f GB/s ", label_.c_str(), bar.c_str(), frac * 100,
               human_bytes(done).c_str(), human_bytes(total).c_str(), rate);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace sluice::tools
