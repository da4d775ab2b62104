// An incremental HTTP/1.0 and 1.1 request parser for sluice serve's front (tools/http/server.h).
//
// Bytes go in as they arrive (feed); the parser stops at the end of the head (so the caller can
// route, refuse or reserve a worker before any body is read) and again at the end of the
// request (so pipelined bytes after it stay with the caller for the next request). Every size a
// client controls is bounded while parsing, never after:
//   - the head (request line + headers) by Limits::max_head bytes and max_headers lines: 431;
//   - the body by Limits::max_body, for Content-Length (413 as soon as the head is read, before
//     any body byte) and for chunked bodies (counted as they are decoded: 413 as soon as the
//     count passes the limit); a chunk-size line or the trailers past max_head: 400.
// Other malformed input gets 400; an unknown Transfer-Encoding 501; a version other than 1.x
// 505. Content-Length together with Transfer-Encoding is refused (400), as request smuggling
// defences do. Nothing here touches a socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::tools::http {

struct Limits {
  size_t max_head = 16 * 1024;  // request line + headers, bytes
  size_t max_headers = 64;
  uint64_t max_body = 1 << 20;  // decoded body bytes
};

struct Request {
  std::string method, target, path;  // path: the target without its query (and scheme and host, in absolute form)
  int minor_version = 1;             // HTTP/1.minor
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case, values trimmed
  std::string body;
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; 1.0 only with "keep-alive"
  bool expect_continue = false;
  bool has_body = false;  // Content-Length > 0 or chunked

  const std::string* header(std::string_view lower_name) const;
};

class RequestParser {
 public:
  enum class State { head, body, complete, error };

  explicit RequestParser(const Limits& limits) : limits_(limits) {}

  // Consumes a prefix of `in` and returns its length. Stops when the head is complete (state
  // body or complete), when the request is complete, or on an error; call again to go on.
  size_t feed(std::string_view in);
  // When false, body bytes are counted and checked but not kept (requests that are refused or
  // answered without their body).
  void keep_body(bool keep) { keep_body_ = keep; }
  // Back to an empty head, for the next request on the connection.
  void reset();

  State state() const { return state_; }
  bool started() const { return started_; }  // any byte of this request seen
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  const Request& request() const { return req_; }
  uint64_t body_received() const { return body_received_; }

 private:
  enum class Chunk { size_line, data, data_crlf, trailers };
  size_t feed_head(std::string_view in);
  size_t feed_body(std::string_view in);
  size_t feed_chunked(std::string_view in);
  bool parse_head();
  bool parse_chunk_size();
  void fail(int status, std::string message);
  void add_body(std::string_view bytes);

  Limits limits_;
  State state_ = State::head;
  Request req_;
  std::string head_;  // head bytes so far; also the current chunk-size or trailer line
  bool started_ = false, keep_body_ = true, chunked_ = false;
  uint64_t content_length_ = 0, body_received_ = 0;
  Chunk chunk_ = Chunk::size_line;
  uint64_t chunk_left_ = 0;
  size_t trailer_bytes_ = 0;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace sluice::tools::http
