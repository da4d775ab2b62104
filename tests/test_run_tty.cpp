// `sluice run --stats` on a terminal: the per-token figures go to a status line on the bottom
// row (a scroll region keeps the generated text above it) instead of lines that interleave with
// the text; off a terminal the plain lines stay.
#include <doctest/doctest.h>

#include "tests/pty_process.h"
#include "tests/test_support.h"

using namespace sluice;

namespace {

std::string model() { return (test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string(); }

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("sluice run --stats on a terminal updates one status line in place under the text") {
  test::PtyProcess p({"run", "-m", model(), "--cache-experts", "25%", "-p", "The quick brown fox", "-n", "6", "--stats"}, 24, 120);
  const int rc = p.wait_exit(120);
  const std::string& out = p.output();
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("\033[1;23r") != std::string::npos);  // rows 1..23 scroll, row 24 is the status
  // Every per-token figure is drawn on row 24 after clearing it, never as a line of its own.
  const size_t tokens = count(out, "[token ");
  CHECK(tokens == 6);
  CHECK(count(out, "\033[24;1H\033[2K[token ") == tokens);
  CHECK(out.find("\033[r") != std::string::npos);  // the full scroll region is restored at the end
  CHECK(out.find("decode hit rate") != std::string::npos);
}

TEST_CASE("sluice run --stats off a terminal prints one plain line per token") {
  const auto r = test::run_sluice("run -m '" + model() + "' --cache-experts 25% -p 'The quick brown fox' -n 6 --stats");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(count(r.err, "\n[token ") + (r.err.rfind("[token ", 0) == 0) == 6);
  CHECK(r.err.find('\033') == std::string::npos);
}
