#include "tools/http/response.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>

namespace sluice::tools::http {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
}  // namespace

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string serialize_head(int status, std::string_view content_type, const std::vector<Header>& headers,
                           bool keep_alive, long long content_length, bool chunked) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  out += "Content-Type: ";
  out += content_type;
  out += "\r\n";
  if (content_length >= 0) out += "Content-Length: " + std::to_string(content_length) + "\r\n";
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  out += "\r\n";
  return out;
}

std::string serialize(const Reply& reply, bool keep_alive) {
  return serialize_head(reply.status, reply.content_type, reply.headers, keep_alive,
                        static_cast<long long>(reply.body.size())) +
         reply.body;
}

void StopSignal::request(std::chrono::milliseconds grace) {
  int64_t zero = 0;
  const int64_t at = now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(grace).count();
  at_ns_.compare_exchange_strong(zero, at == 0 ? 1 : at);
}

bool StopSignal::past_grace() const {
  const int64_t at = at_ns_.load();
  return at != 0 && now_ns() >= at;
}

Clock::time_point StopSignal::bound(Clock::time_point deadline) const {
  const int64_t at = at_ns_.load();
  if (at == 0) return deadline;
  const Clock::time_point cut = Clock::time_point(std::chrono::nanoseconds(at)) + kWriteSlack;
  return std::min(deadline, cut);
}

bool Responder::write_all(std::string_view data) {
  if (failed_) return false;
  const Clock::time_point deadline = stop_.bound(Clock::now() + write_timeout_);
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd_, POLLOUT, 0};
      if (left > 0 && ::poll(&p, 1, static_cast<int>(left)) > 0 && !(p.revents & (POLLERR | POLLHUP))) continue;
    }
    failed_ = true;  // reset, closed, or not reading within the write timeout
    return false;
  }
  return true;
}

void Responder::send(const Reply& reply) {
  responded_ = true;
  write_all(serialize(reply, keep_alive_));
}

bool Responder::begin_stream(std::string_view content_type, const std::vector<Header>& headers) {
  responded_ = streaming_ = true;
  if (http10_) keep_alive_ = false;  // the body ends with the connection
  return write_all(serialize_head(200, content_type, headers, keep_alive_, -1, !http10_));
}

bool Responder::write(std::string_view data) {
  if (data.empty()) return !failed_;
  if (http10_) return write_all(data);
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string framed = size;
  framed.append(data);
  framed += "\r\n";
  return write_all(framed);
}

void Responder::end_stream() {
  if (!http10_) write_all("0\r\n\r\n");
}

bool Responder::client_gone() {
  if (failed_) return true;
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) failed_ = true;
  return failed_;
}

}  // namespace sluice::tools::http
