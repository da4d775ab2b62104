// Responses of sluice serve's HTTP front: whole replies (Reply, serialize) and the Responder a
// worker writes through, for a whole reply or a stream.
//
// Streams: HTTP/1.1 clients get chunked transfer coding (the connection may then carry the next
// request); HTTP/1.0 has no chunked coding, so an HTTP/1.0 stream is sent raw and ends when the
// server closes the connection. Writes are bounded in time (a client that stops reading is
// treated as gone after the write timeout), and at shutdown by the stop signal's cut time.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/http/request_parser.h"

namespace sluice::tools::http {

using Clock = std::chrono::steady_clock;
using Header = std::pair<std::string, std::string>;

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<Header> headers;  // extra ones (Allow, Retry-After, ...)
};

const char* reason_phrase(int status);

// Status line and headers; a body of `content_length` bytes follows (no length: a stream,
// chunked when `chunked`, else delimited by the connection's close).
std::string serialize_head(int status, std::string_view content_type, const std::vector<Header>& headers,
                           bool keep_alive, long long content_length, bool chunked = false);
std::string serialize(const Reply& reply, bool keep_alive);

// Shutdown timing shared by the front and the workers: once requested, in-flight work may go on
// for `grace`, then is cut; writes get a little longer so that every stream can be closed
// properly (final chunk, [DONE]).
class StopSignal {
 public:
  static constexpr std::chrono::milliseconds kWriteSlack{500};
  void request(std::chrono::milliseconds grace);  // the first call counts
  bool requested() const { return at_ns_.load() != 0; }
  bool past_grace() const;  // cut in-flight work now
  Clock::time_point bound(Clock::time_point deadline) const;  // earlier of deadline and cut + slack

 private:
  std::atomic<int64_t> at_ns_{0};  // steady clock of the cut time; 0: running
};

class Responder {
 public:
  Responder(int fd, const Request& request, const StopSignal& stop, std::chrono::milliseconds write_timeout)
      : fd_(fd), http10_(request.minor_version == 0), keep_alive_(request.keep_alive), stop_(stop),
        write_timeout_(write_timeout) {}

  void send(const Reply& reply);
  // Sends the head of a stream; false when the client is gone.
  bool begin_stream(std::string_view content_type, const std::vector<Header>& headers = {});
  // One piece of the stream; false when the client is gone (or stopped reading).
  bool write(std::string_view data);
  void end_stream();

  // The client closed or reset its side (checked without reading: pipelined bytes stay). A
  // client that half-closes after sending its request counts as gone.
  bool client_gone();
  bool stopping() const { return stop_.requested(); }
  bool cut_now() const { return stop_.past_grace(); }

  bool responded() const { return responded_; }
  bool keep_alive() const { return keep_alive_ && !failed_; }

 private:
  bool write_all(std::string_view data);

  int fd_;
  bool http10_, keep_alive_;
  const StopSignal& stop_;
  std::chrono::milliseconds write_timeout_;
  bool responded_ = false, streaming_ = false, failed_ = false;
};

}  // namespace sluice::tools::http
