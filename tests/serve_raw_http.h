// Raw-socket HTTP for the hostile-client suites of sluice serve: a connection that sends exactly
// the bytes a test gives (partial heads, trickles, pipelined requests, chunked bodies) and reads
// with deadlines, and a parser for the responses that come back (Content-Length, chunked, or
// delimited by the close).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::test {

class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawConn() { reset(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  RawConn(RawConn&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until done(all bytes so far) holds, the peer closes, or the timeout passes.
  std::string read_until(const std::function<bool(const std::string&)>& done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!(done && done(in_)) && !closed_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[16384];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) closed_ = true;
      else in_.append(buf, static_cast<size_t>(n));
    }
    return in_;
  }
  std::string read_to_close(std::chrono::milliseconds timeout) { return read_until({}, timeout); }
  bool peer_closed() const { return closed_; }
  const std::string& received() const { return in_; }

 private:
  int fd_ = -1;
  std::string in_;
  bool closed_ = false;
};

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-case
  std::string body;                            // chunked bodies decoded
  bool chunked = false;
};

// Parses the responses in `raw` in order (1xx interim responses skipped); a response whose
// body is delimited by the close takes the rest. Stops at the first incomplete one.
inline std::vector<RawResponse> parse_responses(const std::string& raw) {
  std::vector<RawResponse> out;
  size_t at = 0;
  while (at < raw.size()) {
    const size_t end = raw.find("\r\n\r\n", at);
    if (end == std::string::npos || raw.compare(at, 5, "HTTP/") != 0) break;
    RawResponse r;
    r.status = std::atoi(raw.c_str() + at + 9);
    size_t line = raw.find("\r\n", at) + 2;
    while (line < end) {
      const size_t next = raw.find("\r\n", line);
      const std::string h = raw.substr(line, next - line);
      const size_t colon = h.find(':');
      std::string name = h.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = colon + 1;
      while (v < h.size() && h[v] == ' ') ++v;
      r.headers[name] = h.substr(v);
      line = next + 2;
    }
    at = end + 4;
    if (r.status >= 100 && r.status < 200) continue;
    if (r.headers.count("content-length")) {
      const size_t n = std::stoul(r.headers["content-length"]);
      if (at + n > raw.size()) break;
      r.body = raw.substr(at, n);
      at += n;
    } else if (r.headers.count("transfer-encoding") && r.headers.at("transfer-encoding") == "chunked") {
      r.chunked = true;
      bool complete = false;
      for (;;) {
        const size_t eol = raw.find("\r\n", at);
        if (eol == std::string::npos) break;
        const size_t n = std::stoul(raw.substr(at, eol - at), nullptr, 16);
        if (eol + 2 + n + 2 > raw.size()) break;
        r.body += raw.substr(eol + 2, n);
        at = eol + 2 + n + 2;
        if (n == 0) {
          complete = true;
          break;
        }
      }
      if (!complete) break;
    } else {
      r.body = raw.substr(at);
      at = raw.size();
    }
    out.push_back(std::move(r));
  }
  return out;
}

// A POST with its body; `extra_headers` lines end in CRLF ("Connection: close\r\n").
inline std::string http_post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// One request on a fresh connection, read until the server closes it (so the request should
// say "Connection: close"); the parsed response, or status 0.
inline RawResponse raw_request(int port, const std::string& request, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  RawConn c(port);
  if (!c.ok() || !c.send(request)) return {};
  const std::vector<RawResponse> rs = parse_responses(c.read_to_close(timeout));
  return rs.empty() ? RawResponse{} : rs.front();
}

// Probes that retry: a loaded machine may answer late, a server that refuses does not answer
// well at all. `tries` attempts on fresh connections, `gap` apart; true on the first success.
inline bool health_answers(int port, int tries = 15, std::chrono::milliseconds gap = std::chrono::milliseconds(200)) {
  for (int i = 0; i < tries; ++i) {
    if (raw_request(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", std::chrono::seconds(10)).status == 200)
      return true;
    std::this_thread::sleep_for(gap);
  }
  return false;
}

// A valid greedy completion of 4 tokens gets 200 with 4 completion tokens and non-empty text.
inline bool completion_succeeds(int port, int tries = 15, std::chrono::milliseconds gap = std::chrono::milliseconds(200)) {
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0})";
  for (int i = 0; i < tries; ++i) {
    const RawResponse r = raw_request(port, http_post("/v1/completions", body, "Connection: close\r\n"), std::chrono::seconds(60));
    if (r.status == 200 && r.body.find("\"completion_tokens\":4") != std::string::npos &&
        r.body.find("\"text\":\"\"") == std::string::npos)
      return true;
    std::this_thread::sleep_for(gap);
  }
  return false;
}

// Open descriptors of a process (entries of /proc/PID/fd); -1 when it cannot be read.
inline long open_descriptors(pid_t pid) {
  std::error_code ec;
  long n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end; it.increment(ec)) ++n;
  return ec ? -1 : n;
}

}  // namespace sluice::test
