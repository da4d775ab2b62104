// A real `sluice serve` for the HTTP suites: started on a free localhost port (--port 0, the
// port read from its start-up line), stopped with SIGTERM at scope end. Plus a raw-socket
// streaming client, so tests can read part of a stream and then vanish mid-response.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

extern char** environ;

namespace sluice::test {

class ServeProcess {
 public:
  // args: everything after `sluice serve` (without --port); throws std::runtime_error when the
  // server does not come up within the timeout (the message carries its stderr).
  // `launcher`: a command the server runs under (e.g. env ... mpirun -np 2), found on PATH.
  explicit ServeProcess(const std::vector<std::string>& args, int timeout_s = 120,
                        const std::vector<std::string>& launcher = {}) {
    dir_ = temp_dir("serve");
    err_path_ = (dir_ / "err").string();
    std::vector<std::string> argv_s = launcher;
    for (const char* a : {"serve", "--port", "0", "--host", "127.0.0.1"}) argv_s.push_back(a);
    argv_s.insert(argv_s.begin() + static_cast<std::ptrdiff_t>(launcher.size()), binary());
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("cannot start " + argv_s[0]);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string err = read_text(err_path_);
      const size_t at = err.find("listening on http://127.0.0.1:");
      if (at != std::string::npos && err.find('\n', at) != std::string::npos) {
        port_ = std::stoi(err.substr(at + 30));
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("sluice serve exited: " + err);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop();
    throw std::runtime_error("sluice serve did not start in time: " + read_text(err_path_));
  }
  ~ServeProcess() { stop(); }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // The sluice binary the server runs: this build's, or $SLUICE_SERVE_BINARY (to show that a
  // test fails against an older server).
  static std::string binary() {
    const char* other = std::getenv("SLUICE_SERVE_BINARY");
    return other && *other ? other : SLUICE_BINARY;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Peak resident memory so far (VmHWM of /proc/PID/status), bytes; -1 when unknown.
  long long peak_rss() const {
    const std::string status = read_text("/proc/" + std::to_string(pid_) + "/status");
    const size_t at = status.find("VmHWM:");
    return at == std::string::npos ? -1 : std::stoll(status.substr(at + 6)) * 1024;
  }
  // False once the server has exited (reaped here; stop() then returns its exit status).
  bool alive() {
    int status = 0;
    if (pid_ <= 0) return false;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    pid_ = -1;
    exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  std::string stderr_text() const { return read_text(err_path_); }
  // Exit status after SIGTERM (0 for a clean stop).
  int stop() {
    if (pid_ <= 0) return exit_;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_ = 137;
    return exit_;
  }

 private:
  std::filesystem::path dir_;
  std::string err_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_ = -1;
};

// Text as a JSON string carries it: invalid UTF-8 (random tiny models emit stray byte tokens)
// becomes U+FFFD, as the server's responses do; `sluice run` prints the raw bytes.
inline std::string as_json_text(const std::string& s) {
  return nlohmann::json::parse(nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

// POSTs `body` over a fresh connection and hands each chunk of the raw response to on_data;
// stops (closing the socket) when on_data returns false or the server closes. Returns all bytes.
inline std::string raw_post(int port, const std::string& path, const std::string& body,
                            const std::function<bool(const std::string&)>& on_data = {}) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return {};
  }
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)!send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string all;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
    if (on_data && !on_data(all)) break;
  }
  close(fd);
  return all;
}

}  // namespace sluice::test
