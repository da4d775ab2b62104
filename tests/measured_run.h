// A `sluice` child whose peak resident memory the test measures itself, not from what sluice
// prints: VmHWM read from /proc/PID/status while the child runs, and the kernel's high-water mark
// of the child at exit (wait4's ru_maxrss), the larger of the two. The budget tests bound it.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "tests/test_support.h"

namespace sluice::test {

struct MeasuredRun {
  CommandResult result;
  uint64_t peak_bytes = 0;   // max(VmHWM polled, ru_maxrss at exit)
  uint64_t polled_bytes = 0;  // the last VmHWM read while it ran (a lower bound of the peak)
};

// VmHWM of `pid` in bytes; 0 when it cannot be read (the process has gone).
inline uint64_t read_vm_hwm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      uint64_t kib = 0;
      in >> kib;
      return kib << 10;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

// Runs `env VARS sluice ARGS` (shell words, as run_sluice takes them); stdout and stderr captured.
inline MeasuredRun run_sluice_measured(const std::string& args, const std::string& env = "") {
  const std::filesystem::path dir = temp_dir("measured");
  const std::string out_path = (dir / "out").string(), err_path = (dir / "err").string();
  // `exec` all the way: the measured pid is sluice's own (sh and env replace themselves).
  const std::string command = "exec env " + env + " '" + sluice_binary() + "' " + args + " >'" + out_path + "' 2>'" +
                              err_path + "' </dev/null";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  MeasuredRun run;
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) break;
    run.polled_bytes = std::max(run.polled_bytes, read_vm_hwm(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int status = 0;
  rusage usage{};
  REQUIRE(::wait4(pid, &status, 0, &usage) == pid);
  run.peak_bytes = std::max(run.polled_bytes, static_cast<uint64_t>(usage.ru_maxrss) << 10);
  run.result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.result.out = read_text(out_path);
  run.result.err = read_text(err_path);
  std::filesystem::remove_all(dir);
  return run;
}

}  // namespace sluice::test
