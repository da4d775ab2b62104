#include "tools/http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace sluice::tools::http {

namespace {
constexpr size_t kReadChunk = 16 * 1024;
constexpr auto kLinger = std::chrono::seconds(1);
constexpr int kTickMs = 50;  // deadline checks at least this often
}  // namespace

struct Server::Conn {
  enum class Phase { head, body, busy, writing, draining, closed };
  Conn(int f, const Limits& limits) : fd(f), parser(limits) {}
  int fd;
  Phase phase = Phase::head;
  RequestParser parser;
  std::string in;  // read, not parsed yet (pipelined bytes after a request stay here)
  std::string out;
  size_t out_at = 0;
  bool keep_after_write = true;
  // The reply answers a request whose head was malformed (400, 501, 505) and that announced no
  // body: once the reply is out, nothing more is expected from the client.
  bool head_error = false;
  const Route* route = nullptr;
  uint32_t events = 0;  // registered with epoll; 0: not registered
  Clock::time_point head_deadline, body_start, write_deadline, linger_deadline;
};

Server::Server(const ServerOptions& options, ErrorBody error_body)
    : options_(options), error_body_(std::move(error_body)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  const std::string where = options_.host + ":" + port;
  if (getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found) != 0 || !found)
    throw Error(ErrorCode::io_error, "cannot listen on " + where + " (not an address here)");
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, static_cast<int>(options_.max_connections)) == 0)
      listen_fd_ = fd;
    else
      ::close(fd);
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) throw Error(ErrorCode::io_error, "cannot listen on " + where + " (in use, or not an address here)");
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw Error(ErrorCode::io_error, std::string("epoll/eventfd: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  pool_ = std::make_unique<WorkerPool>(options_.workers);
}

Server::~Server() {
  pool_.reset();  // joins the workers (all idle once run() returned)
  for (auto& [fd, c] : conns_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Server::get(const std::string& path, InlineHandler handler) { routes_[path].get = std::move(handler); }
void Server::post(const std::string& path, WorkerHandler handler) { routes_[path].post = std::move(handler); }

void Server::stop() {
  stop_.request(options_.shutdown_grace);
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void Server::run() {
  epoll_event events[64];
  Clock::time_point last_check = Clock::now();
  while (!(stopping_ && busy_ == 0)) {
    const int n = epoll_wait(epoll_fd_, events, 64, kTickMs);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        accept_all();
      } else if (fd == wake_fd_) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof v);
        if (stop_.requested() && !stopping_) begin_stop();
        take_back_returned();
      } else if (auto it = conns_.find(fd); it != conns_.end()) {
        on_event(*it->second, events[i].events);
      }
    }
    if (Clock::now() - last_check >= std::chrono::milliseconds(kTickMs)) {
      check_deadlines();
      last_check = Clock::now();
    }
    for (auto it = conns_.begin(); it != conns_.end();) {  // closed ones go now that no event names them
      if (it->second->phase == Conn::Phase::closed) {
        ::close(it->first);
        --closing_;
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void Server::accept_all() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of descriptors: the rest wait in the backlog
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // stream tokens go out at once
    // A connection whose reply is out and that only waits for the client's close is dropped
    // before a new client is refused.
    if (conns_.size() - closing_ >= options_.max_connections) evict_draining();
    if (conns_.size() - closing_ >= options_.max_connections) {
      Reply r{503, "application/json",
              error_body_(503, "the server has " + std::to_string(options_.max_connections) +
                                   " connections open, its limit; retry later"),
              {{"Retry-After", "1"}}};
      const std::string bytes = serialize(r, false);
      (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Conn>(fd, options_.limits);
    c->head_deadline = Clock::now() + options_.head_timeout;
    Conn& ref = *c;
    conns_.emplace(fd, std::move(c));
    watch(ref, EPOLLIN | EPOLLRDHUP);
  }
}

void Server::watch(Conn& c, uint32_t events) {
  if (events == c.events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = c.fd;
  if (events == 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, &ev);
  else epoll_ctl(epoll_fd_, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &ev);
  c.events = events;
}

void Server::close_conn(Conn& c) {
  if (c.phase == Conn::Phase::closed) return;
  watch(c, 0);
  c.phase = Conn::Phase::closed;  // the descriptor closes after this round of events
  ++closing_;
}

void Server::evict_draining() {
  Conn* oldest = nullptr;
  for (auto& [fd, c] : conns_)
    if (c->phase == Conn::Phase::draining && (!oldest || c->linger_deadline < oldest->linger_deadline)) oldest = c.get();
  if (oldest) close_conn(*oldest);
}

void Server::on_event(Conn& c, uint32_t events) {
  using P = Conn::Phase;
  if (c.phase == P::writing) {
    if (events & (EPOLLERR | EPOLLHUP)) return close_conn(c);
    if (events & EPOLLOUT) flush(c);
    return;
  }
  if (c.phase != P::head && c.phase != P::body && c.phase != P::draining) return;
  char buf[kReadChunk];
  const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) return close_conn(c);  // the client closed (mid-request or between requests)
  if (c.phase == P::draining) return;  // dropped: the reply is out, only the close is left
  c.in.append(buf, static_cast<size_t>(n));
  advance(c);
}

void Server::advance(Conn& c) {
  using P = Conn::Phase;
  using S = RequestParser::State;
  for (;;) {
    if (c.phase == P::writing && c.out_at == c.out.size()) {  // a response is out: the next request
      if (!c.keep_after_write || stopping_) return linger(c);
      c.parser.reset();
      c.route = nullptr;
      c.out.clear();
      c.out_at = 0;
      c.phase = P::head;
      c.head_deadline = Clock::now() + options_.head_timeout;
      watch(c, EPOLLIN | EPOLLRDHUP);
    }
    if (c.phase != P::head && c.phase != P::body) return;
    const S before = c.parser.state();
    c.in.erase(0, c.parser.feed(c.in));
    const S now = c.parser.state();
    if (now == S::error) {
      // Once the reply is written the loop's first step closes the connection (at once, or
      // after a short linger when the client may still be sending).
      const int st = c.parser.error_status();
      c.head_error = (st == 400 || st == 501 || st == 505) && !c.parser.request().has_body;
      fail(c, st, c.parser.error_message());
      continue;
    }
    if (before == S::head && now != S::head) {
      on_head(c);
      continue;
    }
    if (now == S::complete) {
      on_complete(c);
      continue;
    }
    if (c.in.empty()) return;  // more bytes needed
  }
}

void Server::on_head(Conn& c) {
  const Request& r = c.parser.request();
  c.body_start = Clock::now();
  c.phase = Conn::Phase::body;
  const auto it = routes_.find(r.path);
  const bool post = r.method == "POST";
  const bool get = r.method == "GET" || r.method == "HEAD";  // HEAD: GET's answer without its body
  if (it != routes_.end() && ((post && it->second.post) || (get && it->second.get))) {
    c.route = &it->second;
    if (!post) {
      c.parser.keep_body(false);  // GET routes take no body: counted, dropped
      return;
    }
    if (stopping_) return fail(c, 503, "the server is shutting down");
    // No worker is taken yet: the loop reads the body (bounded by --max-body and the body
    // rate), so a client that sends a head and then nothing holds a connection, never a worker.
    if (r.expect_continue) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      (void)!::send(c.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return;
  }
  Reply rep;
  if (it == routes_.end()) {
    rep.status = 404;
    rep.body = error_body_(404, "no route " + r.method + " " + r.path);
  } else {
    const std::string allow = it->second.post ? "POST" : "GET, HEAD";
    rep.status = 405;
    rep.body = error_body_(405, r.path + " takes " + allow + ", not " + r.method);
    rep.headers.emplace_back("Allow", allow);
  }
  // Without a body the connection goes on; a body is not read but closed on (lingering).
  reply(c, rep, r.keep_alive && !r.has_body);
}

void Server::on_complete(Conn& c) {
  const Request& r = c.parser.request();
  if (r.method != "POST") {
    Reply rep;
    try {
      rep = c.route->get(r);
    } catch (const std::exception& e) {
      rep = Reply{500, "application/json", error_body_(500, e.what()), {}};
    }
    return reply(c, rep, r.keep_alive);
  }
  // A worker is taken only now that the body is complete; the body has been read, so a 503
  // here leaves the connection usable.
  if (stopping_) return reply(c, Reply{503, "application/json", error_body_(503, "the server is shutting down"), {}}, false);
  if (!pool_->try_reserve())
    return reply(c,
                 Reply{503, "application/json",
                       error_body_(503, "all " + std::to_string(pool_->size()) + " request workers are busy; retry later"),
                       {{"Retry-After", "1"}}},
                 r.keep_alive);
  // The worker owns the connection until it hands it back.
  c.phase = Conn::Phase::busy;
  watch(c, 0);
  ++busy_;
  Conn* conn = &c;
  const WorkerHandler* handler = &c.route->post;
  pool_->run(
      [this, conn, handler] {
        Responder out(conn->fd, conn->parser.request(), stop_, options_.write_timeout);
        try {
          (*handler)(conn->parser.request(), out);
        } catch (const std::exception& e) {
          if (!out.responded()) out.send(Reply{500, "application/json", error_body_(500, e.what()), {}});
        }
        if (!out.responded()) out.send(Reply{500, "application/json", error_body_(500, "no response"), {}});
        conn->keep_after_write = out.keep_alive();
      },
      [this, conn] {
        {
          std::lock_guard lock(returned_mu_);
          returned_.emplace_back(conn, conn->keep_after_write);
        }
        const uint64_t one = 1;
        (void)!::write(wake_fd_, &one, sizeof one);
      });
}

void Server::take_back_returned() {
  std::vector<std::pair<Conn*, bool>> back;
  {
    std::lock_guard lock(returned_mu_);
    back.swap(returned_);
  }
  for (auto [c, keep] : back) {
    --busy_;
    c->out.clear();
    c->out_at = 0;
    c->keep_after_write = keep;
    c->phase = Conn::Phase::writing;  // with nothing left to write: advance() goes to the next request
    advance(*c);
  }
}

void Server::reply(Conn& c, const Reply& r, bool keep_alive) {
  // A HEAD request gets the head GET would (Content-Length included), never a body.
  if (c.parser.request().method == "HEAD")
    c.out = serialize_head(r.status, r.content_type, r.headers, keep_alive && !stopping_, static_cast<long long>(r.body.size()));
  else
    c.out = serialize(r, keep_alive && !stopping_);
  c.out_at = 0;
  c.keep_after_write = keep_alive;
  c.phase = Conn::Phase::writing;
  c.write_deadline = Clock::now() + options_.write_timeout;
  watch(c, 0);
  flush(c);
}

void Server::fail(Conn& c, int status, const std::string& message) {
  reply(c, Reply{status, "application/json", error_body_(status, message), {}}, false);
}

void Server::flush(Conn& c) {
  while (c.out_at < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_at += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return watch(c, EPOLLOUT);
    } else {
      return close_conn(c);
    }
  }
  // Called from advance() the caller goes on itself; from an EPOLLOUT event it has to be told.
  if (c.events == EPOLLOUT) advance(c);
}

void Server::linger(Conn& c) {
  ::shutdown(c.fd, SHUT_WR);
  if (stopping_) return close_conn(c);
  // Nothing the client sent is left unread: closing now cannot reset the reply away, and the
  // descriptor is free at once (a burst of malformed requests must not hold descriptors).
  // (A request that failed later, or with a body outstanding, lingers: its client may still be
  // sending, and a close with unread bytes would reset the connection under the reply.)
  int pending = 0;
  if (c.head_error && c.in.empty() && ::ioctl(c.fd, FIONREAD, &pending) == 0 && pending == 0) return close_conn(c);
  c.phase = Conn::Phase::draining;
  c.linger_deadline = Clock::now() + kLinger;
  watch(c, EPOLLIN | EPOLLRDHUP);
}

void Server::check_deadlines() {
  using P = Conn::Phase;
  const Clock::time_point now = Clock::now();
  const auto secs = [](std::chrono::milliseconds ms) { return std::to_string(ms.count() / 1000.0).substr(0, 3); };
  for (auto& [fd, cp] : conns_) {
    Conn& c = *cp;
    if (c.phase == P::head && now >= c.head_deadline) {
      if (!c.parser.started()) {
        close_conn(c);  // idle keep-alive or silent connection
        continue;
      }
      fail(c, 408, "the request head did not arrive within " + secs(options_.head_timeout) + " s");
      advance(c);  // once written: lingering close
    } else if (c.phase == P::body) {
      const double allowed = std::chrono::duration<double>(options_.head_timeout).count() +
                             static_cast<double>(c.parser.body_received()) / static_cast<double>(options_.min_body_rate);
      if (std::chrono::duration<double>(now - c.body_start).count() <= allowed) continue;
      fail(c, 408, "the request body arrived slower than " + std::to_string(options_.min_body_rate / 1024) + " KiB/s");
      advance(c);
    } else if (c.phase == P::writing && now >= c.write_deadline) {
      close_conn(c);
    } else if (c.phase == P::draining && now >= c.linger_deadline) {
      close_conn(c);
    }
  }
}

void Server::begin_stop() {
  stopping_ = true;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  ::close(listen_fd_);
  listen_fd_ = -1;
  for (auto& [fd, c] : conns_)
    if (c->phase != Conn::Phase::busy) close_conn(*c);
}

}  // namespace sluice::tools::http
