// sluice serve against hostile request bytes (issue 26), over raw sockets to a real server on
// 127.0.0.1: JSON nested past the depth limit in any field, bodies past --max-body in either
// transfer encoding (with the server's peak memory read from /proc), pipelined requests,
// wrong methods, HTTP/1.0 streams, and API-field error messages. Set SLUICE_SERVE_BINARY to run
// these cases against another sluice binary (an older server, to see them fail).
#include <doctest/doctest.h>

#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "tests/model_reference.h"
#include "tests/serve_process.h"
#include "tests/serve_raw_http.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using nlohmann::json;

std::string model_path() { return (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string(); }

std::string nested(size_t n) { return std::string(n, '[') + std::string(n, ']'); }

std::string error_message(const RawResponse& r) {
  const json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"]["message"].get<std::string>() : r.body;
}

void check_healthy(ServeProcess& server) {
  REQUIRE(server.alive());
  const RawResponse h = raw_request(server.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5s);
  CHECK(h.status == 200);
}

}  // namespace

TEST_CASE("sluice serve answers 400 to JSON nested past its depth limit in any field, and keeps serving") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256", "--max-body", "2M"});
  const std::string deep = nested(120000);  // ~240 KB: overflowed the old server's stack
  const std::vector<std::pair<std::string, std::string>> bodies{
      {"/v1/completions", "{\"x\":" + deep + ",\"prompt\":\"hi\"}"},
      {"/v1/completions", "{\"prompt\":" + deep + "}"},
      {"/v1/completions", "{\"prompt\":\"hi\",\"stop\":" + deep + "}"},
      {"/v1/chat/completions", "{\"messages\":" + deep + "}"},
      {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":" + deep + "}]}"},
      {"/v1/completions", "{\"x\":" + nested(65) + ",\"prompt\":\"hi\"}"},  // just past the limit
  };
  for (const auto& [path, body] : bodies) {
    CAPTURE(body.substr(0, 60));
    const RawResponse r = raw_request(server.port(), http_post(path, body, "Connection: close\r\n"), 30s);
    CHECK(r.status == 400);
    CHECK(error_message(r).find("nests deeper than 64 levels") != std::string::npos);
    check_healthy(server);
  }
  // Too many values (each a token id) is refused too, by count, before any value is built.
  std::string ids = "[";
  for (int i = 0; i < 70000; ++i) ids += i ? ",1" : "1";
  const RawResponse many = raw_request(server.port(), http_post("/v1/completions", "{\"prompt\":" + ids + "]}", "Connection: close\r\n"));
  CHECK(many.status == 400);
  CHECK(error_message(many).find("more than 65536 values") != std::string::npos);
  // Nesting within the limit, in a field the API ignores, is served.
  const RawResponse ok = raw_request(
      server.port(),
      http_post("/v1/completions", "{\"x\":" + nested(60) + ",\"prompt\":\"hi\",\"max_tokens\":2,\"temperature\":0}",
                "Connection: close\r\n"));
  CHECK_MESSAGE(ok.status == 200, ok.body);
  check_healthy(server);
}

TEST_CASE("sluice serve refuses bodies past --max-body in both transfer encodings, within its memory") {
  // The default --max-body (1 MiB). The server's peak resident memory (VmHWM, read here from
  // /proc) may grow during the attack by what one body up to the limit costs, and no more: a
  // server that kept decoding a chunked body past the limit would pass the bound within the
  // 256 MiB the client offers.
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256"});
  const bool sanitized = read_text("/proc/" + std::to_string(server.pid()) + "/maps").find("libasan") != std::string::npos;
  // The first request (below) warms the paths every request takes; the growth is counted after it.
  // Content-Length over the limit: 413 before any body byte is sent (none is).
  {
    RawConn c(server.port());
    REQUIRE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 300000000\r\n\r\n"));
    const auto rs = parse_responses(c.read_until([](const std::string& s) { return !parse_responses(s).empty(); }, 30s));
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].status == 413);
    CHECK(error_message(rs[0]).find("--max-body") != std::string::npos);
  }
  const long long start_peak = server.peak_rss();
  // A chunked body of up to 256 MiB in 64 KiB chunks: 413 while it is still arriving.
  RawConn c(server.port());
  REQUIRE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  fcntl(c.fd(), F_SETFL, fcntl(c.fd(), F_GETFL) | O_NONBLOCK);
  char size_line[16];
  std::snprintf(size_line, sizeof size_line, "%x\r\n", 65536);
  const std::string piece = std::string(size_line) + std::string(65536, 'a') + "\r\n";
  size_t sent = 0, at = 0;
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (sent < (256u << 20) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{c.fd(), POLLIN | POLLOUT, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    if (p.revents & POLLIN) {
      char buf[4096];
      const ssize_t n = recv(c.fd(), buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
      if (got.find("}}") != std::string::npos) break;  // the whole JSON error is in
      continue;
    }
    if (p.revents & (POLLERR | POLLHUP)) break;
    const ssize_t n = ::send(c.fd(), piece.data() + at, piece.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) break;
    if (n > 0) {
      at += static_cast<size_t>(n);
      if (at == piece.size()) at = 0, sent += 65536;
    }
  }
  MESSAGE("chunked body bytes sent before the answer: ", sent);
  const auto rs = parse_responses(got);
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].status == 413);
  CHECK(sent < (16u << 20));
  const long long peak = server.peak_rss();
  // One 1 MiB body grows its string through doubling (about 2 MiB of capacity, 4 MiB of
  // allocations that a sanitizer's quarantine keeps), plus read buffers.
  const long long allowed = (sanitized ? 24ll : 12ll) << 20;
  MESSAGE("peak RSS ", peak >> 20, " MiB, ", (peak - start_peak) >> 10, " KiB over the peak before the chunked body (allowed ",
          allowed >> 20, " MiB)", std::string(sanitized ? " (sanitizer build)" : ""));
  CHECK(start_peak > 0);
  CHECK(peak - start_peak <= allowed);
  check_healthy(server);
}

TEST_CASE("sluice serve answers pipelined requests on one connection, in order") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "2", "-c", "256"});
  const std::string a = json{{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}}.dump();
  const std::string b = json{{"prompt", "1, 2, 3,"}, {"max_tokens", 3}, {"temperature", 0}}.dump();
  RawConn c(server.port());
  REQUIRE(c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + http_post("/v1/completions", a) +
                 "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" + http_post("/v1/completions", b) +
                 http_post("/v1/completions", "{\"prompt\": 5}") + http_post("/v1/completions", a, "Connection: close\r\n")));
  const std::vector<RawResponse> rs = parse_responses(c.read_to_close(60s));
  REQUIRE(rs.size() == 6);
  CHECK(rs[0].body.find("\"ok\"") != std::string::npos);
  CHECK(rs[2].body.find("\"list\"") != std::string::npos);
  CHECK(rs[4].status == 400);
  for (size_t i : {1, 3, 5}) {
    CAPTURE(i);
    CHECK(rs[i].status == 200);
    CHECK(json::parse(rs[i].body)["object"] == "text_completion");
  }
  CHECK(json::parse(rs[1].body)["usage"]["completion_tokens"] == 4);
  CHECK(json::parse(rs[3].body)["usage"]["completion_tokens"] == 3);
  CHECK(json::parse(rs[1].body)["choices"][0]["text"] == json::parse(rs[5].body)["choices"][0]["text"]);
  CHECK((rs[5].headers.count("connection") ? rs[5].headers.at("connection") : "") == "close");
}

TEST_CASE("sluice serve answers HEAD on GET routes, absolute-form targets, and Prometheus metrics with TYPE lines") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256"});
  // HEAD: GET's status and Content-Length, no body; the connection goes on to the next request.
  RawConn c(server.port());
  REQUIRE(c.send("HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string raw = c.read_to_close(30s);
  const size_t second = raw.find("HTTP/1.1", 1);
  REQUIRE(second != std::string::npos);
  const std::string head = raw.substr(0, second);
  const auto get = parse_responses(raw.substr(second));
  REQUIRE(get.size() == 1);
  CHECK(get[0].status == 200);
  CHECK(!get[0].body.empty());
  CHECK(head.rfind("HTTP/1.1 200 ", 0) == 0);
  CHECK(head.find("Content-Length: " + std::to_string(get[0].body.size()) + "\r\n") != std::string::npos);
  CHECK(head.find("\r\n\r\n") == head.size() - 4);  // no body bytes after HEAD's head
  RawConn post_head(server.port());
  REQUIRE(post_head.send("HEAD /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string post_head_raw = post_head.read_to_close(30s);
  CHECK(post_head_raw.rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(post_head_raw.find("\r\n\r\n") == post_head_raw.size() - 4);

  // Absolute form (RFC 9112 3.2.2), with a port and a query, and without a path (which is "/",
  // the web chat page).
  for (const std::string target : {"http://127.0.0.1/health", "HTTP://localhost:8080/health?x=1", "http://x"}) {
    CAPTURE(target);
    const RawResponse r = raw_request(server.port(), "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(r.status == 200);
    CHECK((r.body.find("<!doctype html>") != std::string::npos || r.body.find("<!DOCTYPE html>") != std::string::npos) ==
          (target == "http://x"));
  }
  const RawResponse models = raw_request(server.port(), "GET http://127.0.0.1/v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(models.status == 200);
  CHECK(models.body.find("\"list\"") != std::string::npos);

  // Prometheus text format: every sample has HELP and TYPE lines; counts are integers.
  REQUIRE(completion_succeeds(server.port()));
  const RawResponse m = raw_request(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  REQUIRE(m.status == 200);
  size_t samples = 0;
  for (size_t at = 0; at < m.body.size();) {
    const size_t eol = m.body.find('\n', at);
    const std::string line = m.body.substr(at, eol - at);
    at = eol == std::string::npos ? m.body.size() : eol + 1;
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    const std::string name = line.substr(0, line.find(' '));
    const std::string value = line.substr(line.find(' ') + 1);
    CAPTURE(line);
    const std::string type = name.ends_with("_total") ? "counter" : "gauge";
    CHECK(m.body.find("# TYPE " + name + " " + type + "\n") != std::string::npos);
    CHECK(m.body.find("# HELP " + name + " ") != std::string::npos);
    if (name.ends_with("_tokens_total") || name.starts_with("sluice_requests_") || name == "sluice_steps_total")
      CHECK(value.find_first_not_of("0123456789") == std::string::npos);
  }
  CHECK(samples >= 20);
  CHECK(m.body.find("\nsluice_requests_finished_total 1\n") != std::string::npos);
}

TEST_CASE("sluice serve answers 405 on a route's other method, streams raw to HTTP/1.0, and names API fields") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256"});
  const RawResponse get = raw_request(server.port(), "GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(get.status == 405);
  CHECK((get.headers.count("allow") ? get.headers.at("allow") : "") == "POST");
  const RawResponse post_health = raw_request(server.port(), http_post("/health", "{}", "Connection: close\r\n"));
  CHECK(post_health.status == 405);
  CHECK((post_health.headers.count("allow") ? post_health.headers.at("allow") : "") == "GET, HEAD");
  const RawResponse none = raw_request(server.port(), "GET /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(none.status == 404);

  // HTTP/1.0 has no chunked coding: the stream is raw SSE, ended by the close.
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"temperature", 0}, {"stream", true}}.dump();
  RawConn c(server.port());
  REQUIRE(c.send("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body));
  const std::string raw = c.read_to_close(60s);
  CHECK(c.peer_closed());
  const auto rs = parse_responses(raw);
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].status == 200);
  CHECK(!rs[0].chunked);
  CHECK(rs[0].headers.count("transfer-encoding") == 0);
  CHECK(rs[0].body.rfind("data: {", 0) == 0);  // no chunk-size line before the first event
  CHECK(rs[0].body.find("data: [DONE]\n\n") != std::string::npos);

  const RawResponse pen = raw_request(
      server.port(), http_post("/v1/completions", R"({"prompt": "x", "repeat_penalty": 0})", "Connection: close\r\n"));
  CHECK(pen.status == 400);
  CHECK(error_message(pen).find("'repeat_penalty'") != std::string::npos);
  CHECK(error_message(pen).find("--repeat-penalty") == std::string::npos);
}
