#include "tools/status_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sluice::tools {

StatusLine::StatusLine(bool wanted) {
  if (!wanted || !isatty(STDERR_FILENO)) return;
  const char* term = std::getenv("TERM");
  if (term && std::strcmp(term, "dumb") == 0) return;
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 3 || ws.ws_col < 10) return;
  rows_ = ws.ws_row;
  cols_ = ws.ws_col;
  std::fflush(stdout);
  // Make room for the status row, then keep rows 1..N-1 for text (the cursor stays where it was).
  std::fprintf(stderr, "\n\033[1A\0337\033[1;%dr\0338", rows_ - 1);
  std::fflush(stderr);
}

StatusLine::~StatusLine() { close(); }

void StatusLine::update(const std::string& text) {
  if (!active()) return;
  std::fflush(stdout);  // text first, so the cursor we save is after it
  const std::string shown = text.size() > static_cast<size_t>(cols_ - 1) ? text.substr(0, cols_ - 1) : text;
  std::fprintf(stderr, "\0337\033[%d;1H\033[2K%s\0338", rows_, shown.c_str());
  std::fflush(stderr);
}

void StatusLine::close() {
  if (!active()) return;
  std::fflush(stdout);
  std::fprintf(stderr, "\0337\033[%d;1H\033[2K\033[r\0338", rows_);
  std::fflush(stderr);
  rows_ = 0;
}

}  // namespace sluice::tools
