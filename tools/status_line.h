// A status line on the terminal's bottom row that updates in place while text streams above it.
//
// On a terminal (stderr is a TTY), `sluice run --stats` and `sluice chat` show their live figures
// here instead of printing a line per token, which would interleave with the generated text on
// the same screen. The line is kept out of the text's way with a scroll region: rows 1..N-1
// scroll, row N holds the status (DECSTBM; the cursor is saved and restored around each update).
// When stderr is not a terminal, `active()` is false and callers print their plain lines.
#pragma once

#include <string>

namespace sluice::tools {

class StatusLine {
 public:
  // Active only when `wanted`, stderr is a TTY, TERM is not "dumb" and the terminal reports at
  // least 3 rows.
  explicit StatusLine(bool wanted);
  ~StatusLine();  // restores the full scroll region and clears the status row
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  bool active() const { return rows_ > 0; }
  void update(const std::string& text);  // cut to the terminal's width
  void close();                          // as the destructor; idempotent

 private:
  int rows_ = 0, cols_ = 0;
};

}  // namespace sluice::tools
