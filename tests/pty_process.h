// The sluice binary on a pseudo-terminal, for tests of what a person sees on a terminal (the
// --stats status line, `sluice chat`): forkpty() gives the child a terminal of the given size
// as stdin, stdout and stderr; the test writes keys (Ctrl-C is "\x03": the terminal turns it into
// SIGINT) and reads the screen's byte stream.
#pragma once

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice::test {

class PtyProcess {
 public:
  PtyProcess(const std::vector<std::string>& args, unsigned short rows = 24, unsigned short cols = 100) {
    std::vector<std::string> argv_s{sluice_binary()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    winsize ws{};
    ws.ws_row = rows;
    ws.ws_col = cols;
    pid_ = forkpty(&master_, nullptr, nullptr, &ws);
    if (pid_ < 0) throw std::runtime_error("forkpty failed");
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~PtyProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }

  void write_keys(const std::string& keys) {
    if (::write(master_, keys.data(), keys.size()) != static_cast<ssize_t>(keys.size()))
      throw std::runtime_error("write to the pty failed");
  }

  // Reads until `needle` appears in the output after `from` (default: anywhere), or the timeout;
  // true when it appeared.
  bool read_until(const std::string& needle, double timeout_s, size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (out_.find(needle, from) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !pump(static_cast<int>(left.count()))) return out_.find(needle, from) != std::string::npos;
    }
    return true;
  }

  // Reads until the child exits (or the timeout); its exit status (-1 on timeout, 128+N on signal N).
  int wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        while (pump(50)) {
        }
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return -1;
      pump(std::min<int>(100, static_cast<int>(left.count())));
    }
  }

  const std::string& output() const { return out_; }

 private:
  // One read of what is available within `ms`; false at end of file or timeout.
  bool pump(int ms) {
    pollfd p{master_, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(master_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int master_ = -1;
  std::string out_;
};

}  // namespace sluice::test
