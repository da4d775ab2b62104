// sluice serve against clients that hold connections or leave (issue 26), over raw sockets to a
// real server on 127.0.0.1: partial heads that would starve a thread-per-connection server,
// trickled heads and bodies, the connection limit, requests abandoned before their answer, and
// SIGTERM in the middle of streams. Set SLUICE_SERVE_BINARY to run them against another binary.
#include <doctest/doctest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "tests/model_reference.h"
#include "tests/serve_process.h"
#include "tests/serve_raw_http.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string model_path() { return (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string(); }

const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

std::string metric(int port, const std::string& name) {
  const RawResponse m = raw_request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5s);
  const size_t at = m.body.find("\n" + name + " ");
  return at == std::string::npos ? "" : m.body.substr(at + name.size() + 2, m.body.find('\n', at + 1) - at - name.size() - 2);
}

bool wait_for_metric(int port, const std::string& name, const std::string& value, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (metric(port, name) == value) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

}  // namespace

TEST_CASE("with 50 connections holding partial heads, sluice serve answers /health within 1 s and completes a request") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "2", "-c", "256"});
  std::vector<RawConn> holders;
  for (int i = 0; i < 50; ++i) {
    holders.emplace_back(server.port());
    REQUIRE(holders.back().ok());
    REQUIRE(holders.back().send(i % 2 ? "GET /he" : "POST /v1/completions HTTP/1.1\r\nContent-Le"));
  }
  std::this_thread::sleep_for(200ms);  // every holder is accepted and read
  const auto t0 = Clock::now();
  const RawResponse h = raw_request(server.port(), kHealth, 1s);
  const auto took = Clock::now() - t0;
  MESSAGE("/health took ", std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), " ms");
  CHECK(h.status == 200);
  CHECK(took < 1s);
  const RawResponse done = raw_request(
      server.port(),
      http_post("/v1/completions", json{{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}}.dump(), "Connection: close\r\n"),
      10s);
  CHECK(done.status == 200);
  CHECK(done.body.find("\"completion_tokens\":4") != std::string::npos);
}

TEST_CASE("sluice serve closes trickled heads and slow bodies at their deadlines, and bounds its connections") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256",
                       "--header-timeout", "1", "--max-connections", "8"});
  // A head trickled a byte every 100 ms never completes; the deadline is absolute, not per read.
  RawConn trickle(server.port());
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 'a') + "\r\n\r\n";
  const auto t0 = Clock::now();
  size_t i = 0;
  while (i < head.size() && trickle.send(head.substr(i, 1)) && !trickle.peer_closed()) {
    ++i;
    trickle.read_until({}, 100ms);
  }
  const auto took = Clock::now() - t0;
  CHECK(i < head.size());
  CHECK(took < 2500ms);
  const auto trickled = parse_responses(trickle.received());
  REQUIRE(trickled.size() == 1);
  CHECK(trickled[0].status == 408);

  // A body slower than 16 KiB/s after the grace: 408.
  RawConn slow(server.port());
  REQUIRE(slow.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"prompt\":\""));
  const std::string got = slow.read_until({}, 4s);
  const auto slow_rs = parse_responses(got);
  REQUIRE(slow_rs.size() == 1);
  CHECK(slow_rs[0].status == 408);

  // Past --max-connections a new connection is refused with 503 at once, not queued.
  std::vector<RawConn> idle;
  for (int k = 0; k < 8; ++k) idle.emplace_back(server.port());
  std::this_thread::sleep_for(100ms);
  const RawResponse over = raw_request(server.port(), kHealth, 2s);
  CHECK(over.status == 503);
  idle.clear();
  std::this_thread::sleep_for(200ms);
  CHECK(raw_request(server.port(), kHealth, 2s).status == 200);
}

TEST_CASE("sluice serve cancels a non-streaming request whose client has gone, and counts it") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "4096"});
  RawConn c(server.port());
  REQUIRE(c.send(http_post("/v1/completions",
                           json{{"prompt", "Count:"}, {"max_tokens", 4000}, {"temperature", 0}}.dump())));
  REQUIRE(wait_for_metric(server.port(), "sluice_requests_active", "1", 10s));
  c.reset();  // gone before the answer
  CHECK(wait_for_metric(server.port(), "sluice_requests_cancelled_total", "1", 3s));
  CHECK(metric(server.port(), "sluice_requests_finished_total") == "0");
  CHECK(wait_for_metric(server.port(), "sluice_requests_active", "0", 3s));
}

TEST_CASE("sluice serve ends every stream with a final chunk and [DONE] on SIGTERM, and exits within 3 s") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "4", "-c", "4096"});
  std::vector<std::promise<void>> started(4);
  std::vector<std::future<std::string>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::async(std::launch::async, [&, i] {
      RawConn c(server.port());
      const std::string body =
          json{{"prompt", "Story " + std::to_string(i) + ":"}, {"max_tokens", 4000}, {"temperature", 0}, {"stream", true}}.dump();
      if (!c.send(http_post("/v1/completions", body))) {
        started[i].set_value();
        return std::string();
      }
      c.read_until([](const std::string& s) { return s.find("\"text\":\"") != std::string::npos; }, 30s);
      started[i].set_value();
      return c.read_to_close(30s);  // the server closes every connection as it stops
    }));
  }
  for (auto& s : started) s.get_future().wait();
  const auto t0 = Clock::now();
  const int status = server.stop();
  const auto took = Clock::now() - t0;
  MESSAGE("exit after SIGTERM took ", std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), " ms");
  CHECK(status == 0);
  CHECK(took < 3s);
  for (auto& f : streams) {
    const std::string raw = f.get();
    const auto rs = parse_responses(raw);
    REQUIRE(rs.size() == 1);
    const std::string& body = rs[0].body;
    CHECK(body.find("data: [DONE]\n\n") != std::string::npos);
    const size_t last = body.rfind("data: {");
    REQUIRE(last != std::string::npos);
    const json final_chunk = json::parse(body.substr(last + 6, body.find("\n\n", last) - last - 6));
    CHECK(!final_chunk["choices"][0]["finish_reason"].is_null());
  }
}
