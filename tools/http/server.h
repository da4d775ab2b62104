// sluice serve's HTTP/1.1 front: one event-loop thread and a fixed worker pool, built so that
// slow or hostile local clients cannot hold the server.
//
// Why not cpp-httplib (which sluice serve used before): it gives each connection a thread of a
// fixed pool for its whole life and has only per-read timeouts, so a client that trickles one
// header byte every few seconds keeps a thread forever, twenty such clients starve /health,
// the listen backlog is 5, chunked bodies are not counted against the payload limit, and
// pipelined requests after the first are lost. libmicrohttpd could do most of this, but its
// connection timeout is per-inactivity too (a trickle resets it) and it brings its own threading
// model that a long-running streaming response has to be fitted into; the front here is a few
// hundred lines over poll/epoll that do exactly what serve needs.
//
// The event loop (run()) owns every connection that is not running a handler:
//   - accept: at most max_connections open; at the limit a connection that only lingers (its
//     reply is out) is closed first, and if there is none the new connection gets 503 and is
//     closed. The listen backlog equals max_connections.
//   - head: must be complete within head_timeout of the connection's start or of the end of its
//     previous response (an absolute deadline, not per read); else 408 and close (an idle
//     keep-alive connection is just closed). Heads are bounded by Limits (431).
//   - routes: GET routes (and HEAD on them: the same head, no body) are answered by the loop
//     itself (cheap handlers: health, models, metrics), so they work while every worker is busy;
//     a known path with another method gets 405 with Allow, an unknown path 404. Targets may be
//     in origin form (/health) or absolute form (http://host/health).
//   - POST routes: the loop reads the body, holding no worker: Content-Length over --max-body
//     gets 413 at once; chunked bodies are counted while decoded, 413 as soon as they pass it.
//     The body must keep an average of min_body_rate after a head_timeout grace, else 408. So a
//     client that sends a head and no body, or trickles its body, holds one connection and at
//     most max_body bytes, never a worker.
//   - a worker is taken when the body is complete (none free: 503, the connection stays usable);
//     the complete request goes to its worker, which writes the response (whole or streamed)
//     through a Responder and gives the connection back with any pipelined bytes already read;
//     the loop then parses the next request, so pipelined requests are answered in order.
//   - an error reply always ends the connection once written: a malformed head (400/501/505)
//     with nothing more sent is closed at once; other errors (4xx with an unread body,
//     timeouts) close lingering: the write side is shut and what the client still sends is
//     read and dropped until it closes, for up to a second, so that the reply is not lost to a
//     reset. A lingering connection is the first to go when the connection limit is reached.
// Memory: request bodies in memory are bounded by max_connections x max_body; heads and read
// buffers by max_connections x (max_head + 16 KiB).
// Shutdown: stop() (any thread) closes the listener and idle connections at once; handlers see
// stopping(), and cut_now() after the grace, and must then finish their response quickly; run()
// returns when every handler has.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tools/http/request_parser.h"
#include "tools/http/response.h"
#include "tools/http/worker_pool.h"

namespace sluice::tools::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_connections = 512;
  size_t workers = 8;
  Limits limits;
  std::chrono::milliseconds head_timeout{5000};
  uint64_t min_body_rate = 16 * 1024;  // bytes/s, averaged over the body, after head_timeout
  std::chrono::milliseconds write_timeout{10000};
  std::chrono::milliseconds shutdown_grace{2000};
};

using InlineHandler = std::function<Reply(const Request&)>;
using WorkerHandler = std::function<void(const Request&, Responder&)>;
// Builds the body of an error reply (status, one-line message) -> JSON text.
using ErrorBody = std::function<std::string(int, const std::string&)>;

class Server {
 public:
  // Binds and listens; sluice::Error(io_error) when the address cannot be had.
  Server(const ServerOptions& options, ErrorBody error_body);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  const ServerOptions& options() const { return options_; }
  // Routes, before run(). get: answered on the loop thread (must not block); post: on a worker.
  void get(const std::string& path, InlineHandler handler);
  void post(const std::string& path, WorkerHandler handler);

  void run();   // until stop() and every handler has returned
  void stop();  // from any thread

 private:
  struct Conn;
  struct Route {
    InlineHandler get;
    WorkerHandler post;
  };
  void accept_all();
  void on_event(Conn& c, uint32_t events);
  void advance(Conn& c);  // parse what was read; route, dispatch or answer
  void on_head(Conn& c);
  void on_complete(Conn& c);
  void reply(Conn& c, const Reply& r, bool keep_alive);
  void fail(Conn& c, int status, const std::string& message);
  void flush(Conn& c);
  void after_response(Conn& c);
  void linger(Conn& c);
  void close_conn(Conn& c);
  void evict_draining();  // at the connection limit: close the lingering connection closest to its end
  void watch(Conn& c, uint32_t events);
  void check_deadlines();
  void take_back_returned();
  void begin_stop();

  ServerOptions options_;
  ErrorBody error_body_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1, port_ = 0;
  std::map<std::string, Route> routes_;
  std::map<int, std::unique_ptr<Conn>> conns_;
  size_t closing_ = 0;  // connections in conns_ closed this round (their descriptors go at its end)
  size_t busy_ = 0;  // connections a worker holds
  StopSignal stop_;
  bool stopping_ = false;  // loop thread's view
  std::mutex returned_mu_;
  std::vector<std::pair<Conn*, bool>> returned_;  // (connection, keep alive) from workers
  std::unique_ptr<WorkerPool> pool_;
};

}  // namespace sluice::tools::http
