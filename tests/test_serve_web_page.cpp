// The web chat page `sluice serve` answers at /: self-contained (no external resource), and
// driven in a real headless browser (Debian's chromium, installed by scripts/setup, over its
// DevTools pipe): one message
// sent by the page streams back the server's greedy answer, and the page's stats line gives the
// prompt's cached tokens, the decode rate and the expert cache's hit rate.
#include <doctest/doctest.h>

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tests/headless_chromium.h"
#include "tests/model_reference.h"
#include "tests/serve_process.h"

namespace {

using namespace sluice::test;
using nlohmann::json;

std::string model_path() { return require_file(tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string(); }

// The text of a serialized element's content: outerHTML escapes &, < and > (and
// U+00A0) in text nodes.
std::string unescape(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&nbsp;", "\xC2\xA0"}, {"&quot;", "\""}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities)
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + std::strlen(to)))
      s.replace(at, std::strlen(from), to);
  return s;
}

std::string element_text(const std::string& dom, const std::string& id) {
  const std::regex re("<div[^>]*id=\"" + id + "\"[^>]*>([^<]*)</div>");
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(dom, m, re), "no element #" << id << " in the page's DOM:\n" << dom);
  return unescape(m[1]);
}

}  // namespace

TEST_CASE("sluice serve answers / with a chat page that loads nothing from elsewhere") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256"});
  httplib::Client c("127.0.0.1", server.port());
  const auto res = c.Get("/");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type").starts_with("text/html"));
  const std::string& page = res->body;
  CHECK(page.starts_with("<!doctype html>"));
  CHECK(page.find("/v1/chat/completions") != std::string::npos);
  // Self-contained: no script, style sheet or image fetched from a URL, no absolute link.
  CHECK(!std::regex_search(page, std::regex(R"((src|href)\s*=)", std::regex::icase)));
  CHECK(page.find("http://") == std::string::npos);
  CHECK(page.find("https://") == std::string::npos);
  CHECK(page.find("@import") == std::string::npos);
}

TEST_CASE("in a headless chromium the chat page streams the server's greedy answer and prints its stats") {
  const std::string chromium = "/usr/bin/chromium";
  REQUIRE_MESSAGE(std::filesystem::exists(chromium), "chromium missing (scripts/setup installs it)");
  // Half the experts cached, so the answer's decode both hits and misses.
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256",
                       "--cache-experts", "50%", "--kv-type", "f32"});
  const std::string question = "Tell me about rivers";
  const int max_tokens = 10;

  // The same request, not streamed, from this test: the greedy answer the page must show.
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(300, 0);
  const json body = {{"messages", json::array({{{"role", "user"}, {"content", question}}})},
                     {"max_tokens", max_tokens},
                     {"temperature", 0}};
  const auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  const std::string expected = json::parse(res->body)["choices"][0]["message"]["content"];
  require_text(expected, "the server's greedy answer");

  // The browser loads the page, which sends the question (?ask=...) and streams the answer; the
  // test waits in real time for the page's own "done" and reads the DOM then.
  const ScopedTempDir profile("chromium");
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/?ask=Tell%20me%20about%20rivers&temp=0&max=" +
                          std::to_string(max_tokens);
  HeadlessChromium browser(chromium, profile.path().string());
  browser.open(url);
  const bool done = browser.wait_for("document.body && document.body.dataset.state === 'done'", std::chrono::seconds(300));
  const std::string dom = browser.evaluate("document.documentElement.outerHTML");
  REQUIRE_MESSAGE(done, "the page did not finish its answer in 300 s:\n" << dom);
  CHECK(element_text(dom, "answer") == expected);
  const std::string stats = element_text(dom, "stats");
  INFO(stats);
  // The page resent what the test sent: the slot's cache held all but the prompt's last token.
  CHECK(std::regex_search(stats, std::regex(R"(prompt (\d+) tokens \((\d+) cached\))")));
  std::smatch m;
  REQUIRE(std::regex_search(stats, m, std::regex(R"(prompt (\d+) tokens \((\d+) cached\))")));
  CHECK(std::stoi(m[2]) == std::stoi(m[1]) - 1);
  REQUIRE(std::regex_search(stats, m, std::regex(std::to_string(max_tokens) + R"( tokens, ([0-9.]+) tok/s)")));
  CHECK(std::stod(m[1]) > 0);
  REQUIRE(std::regex_search(stats, m, std::regex(R"(expert cache hit rate ([0-9.]+)%)")));
  CHECK(std::stod(m[1]) > 0);
  CHECK(std::stod(m[1]) < 100);
  CHECK(stats.find("length") != std::string::npos);
}
