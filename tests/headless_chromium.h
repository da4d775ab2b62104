// A headless chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: the
// browser reads NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4), so a
// test can wait in real time for a page's own "done" signal and then read its DOM.
//
// Why not --dump-dom --virtual-time-budget: chromium's virtual clock does not stand still while a
// streamed response body is arriving, so a slow stream (the ASan build on a loaded machine) had the
// DOM dumped mid-answer.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sluice::test {

class HeadlessChromium {
 public:
  HeadlessChromium(const std::string& binary, const std::string& profile_dir) {
    int to_browser[2], from_browser[2];
    if (pipe2(to_browser, O_CLOEXEC) != 0 || pipe2(from_browser, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe2 failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, to_browser[0], 3);
    posix_spawn_file_actions_adddup2(&fa, from_browser[1], 4);
    const std::string profile = "--user-data-dir=" + profile_dir;
    std::vector<std::string> args = {binary,          "--headless",    "--no-sandbox",       "--disable-gpu",
                                     "--no-first-run", "--remote-debugging-pipe", profile, "about:blank"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, binary.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to_browser[0]);
    close(from_browser[1]);
    to_ = to_browser[1];
    from_ = from_browser[0];
    if (rc != 0) throw std::runtime_error("cannot start " + binary);
  }
  ~HeadlessChromium() {
    try {
      call("Browser.close", {}, "", std::chrono::seconds(10));
    } catch (...) {
    }
    close(to_);
    close(from_);
    int status = 0;
    for (int i = 0; i < 50 && waitpid(pid_, &status, WNOHANG) != pid_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  HeadlessChromium(const HeadlessChromium&) = delete;
  HeadlessChromium& operator=(const HeadlessChromium&) = delete;

  // Opens url in a new tab; later evaluate() calls run in it.
  void open(const std::string& url) {
    const auto target = call("Target.createTarget", {{"url", url}});
    const auto attached = call("Target.attachToTarget", {{"targetId", target["targetId"]}, {"flatten", true}});
    session_ = attached["sessionId"];
  }

  // The value of a JavaScript expression in the page (strings, numbers, booleans).
  nlohmann::json evaluate(const std::string& expression) {
    const auto r = call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}}, session_);
    if (r.contains("exceptionDetails")) throw std::runtime_error("page script failed: " + r["exceptionDetails"].dump());
    return r["result"].value("value", nlohmann::json());
  }

  // Polls `condition` (a JavaScript expression) until it is true or `limit` passes in real time.
  bool wait_for(const std::string& condition, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (evaluate("!!(" + condition + ")") == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  nlohmann::json call(const std::string& method, const nlohmann::json& params, const std::string& session = "",
                      std::chrono::seconds limit = std::chrono::seconds(120)) {
    nlohmann::json msg = {{"id", ++next_id_}, {"method", method}, {"params", params}};
    if (!session.empty()) msg["sessionId"] = session;
    std::string out = msg.dump();
    out.push_back('\0');
    for (size_t sent = 0; sent < out.size();) {
      const ssize_t n = write(to_, out.data() + sent, out.size() - sent);
      if (n <= 0) throw std::runtime_error("chromium closed its DevTools pipe");
      sent += size_t(n);
    }
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {  // replies and events interleave: read messages until the one answering this id
      for (size_t end = inbox_.find('\0'); end != std::string::npos; end = inbox_.find('\0')) {
        const auto reply = nlohmann::json::parse(inbox_.substr(0, end));
        inbox_.erase(0, end + 1);
        if (!reply.contains("id") || reply["id"] != next_id_) continue;
        if (reply.contains("error")) throw std::runtime_error(method + ": " + reply["error"].dump());
        return reply["result"];
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw std::runtime_error(method + ": no reply from chromium");
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, int(left.count())) <= 0) continue;
      char buf[65536];
      const ssize_t n = read(from_, buf, sizeof buf);
      if (n <= 0) throw std::runtime_error("chromium closed its DevTools pipe");
      inbox_.append(buf, size_t(n));
    }
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  int next_id_ = 0;
  std::string inbox_;
  std::string session_;
};

}  // namespace sluice::test
