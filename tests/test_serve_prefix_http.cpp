// KV prefix reuse through a real `sluice serve` (issue #37's done-when, scaled to a tiny model): a
// conversation of ten turns, each resending the whole history (every earlier prompt) plus new
// tokens, prefills little more than the new tokens (/metrics and every response's
// usage.prompt_tokens_details.cached_tokens), and its greedy answers equal those of a server run
// with --no-cache-prompt, which prefills every prompt whole (the control). The answers are not
// resent (the API gives their text, not their tokens), so each turn also cuts the slot's cache back
// from the previous answer's tokens to the shared prefix.
#include <doctest/doctest.h>

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/model_reference.h"
#include "tests/serve_metrics.h"
#include "tests/serve_process.h"

namespace {

using namespace sluice::test;
using nlohmann::json;

constexpr int kTurns = 10, kNewTokens = 12, kAnswerTokens = 4;

struct Conversation {
  std::vector<json> responses;
  std::vector<std::vector<int32_t>> prompts;
  double prompt_tokens = 0, cached_tokens = 0;  // /metrics, over the conversation
};

json post(int port, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  return json::parse(res->body);
}

Conversation converse(const std::vector<std::string>& serve_args) {
  const Manifest m = load_manifest("deepseek2", "q4_k_m");
  ServeProcess server(serve_args);
  const auto before = read_metrics(server.port());
  Conversation out;
  std::vector<int32_t> history = m.prompt;
  for (int k = 0; k < kTurns; ++k) {
    if (k > 0)
      for (int i = 0; i < kNewTokens; ++i) history.push_back(static_cast<int32_t>((97 + 131 * k + 17 * i) % m.n_vocab));
    out.prompts.push_back(history);
    out.responses.push_back(
        post(server.port(), {{"prompt", history}, {"max_tokens", kAnswerTokens}, {"temperature", 0}}));
  }
  const auto after = read_metrics(server.port());
  for (const char* name : {"sluice_prompt_tokens_total", "sluice_prompt_tokens_cached_total"})
    REQUIRE_MESSAGE(after.count(name), "/metrics has no " << name);
  out.prompt_tokens = after.at("sluice_prompt_tokens_total") - before.at("sluice_prompt_tokens_total");
  out.cached_tokens = after.at("sluice_prompt_tokens_cached_total") - before.at("sluice_prompt_tokens_cached_total");
  return out;
}

// Prompt tokens minus cached ones, summed from the responses' usage (each must report both).
double prefilled_by_usage(const Conversation& c) {
  double sum = 0;
  for (const json& r : c.responses) {
    INFO(r.dump());
    REQUIRE(r["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
    sum += r["usage"]["prompt_tokens"].get<double>() - r["usage"]["prompt_tokens_details"]["cached_tokens"].get<double>();
  }
  return sum;
}

std::vector<std::string> serve_args() {
  return {"-m", (tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf").string(), "--parallel", "2", "-c", "256",
          "-b", "64", "--cache-experts", "50%"};
}

}  // namespace

TEST_CASE("a ten-turn conversation through sluice serve prefills little more than its new tokens and answers as without reuse") {
  const Conversation with = converse(serve_args());
  std::vector<std::string> off = serve_args();
  off.push_back("--no-cache-prompt");
  const Conversation without = converse(off);

  const double new_tokens = static_cast<double>(with.prompts[0].size()) + (kTurns - 1) * kNewTokens;
  const double prefilled = with.prompt_tokens - with.cached_tokens;
  MESSAGE("new tokens " << new_tokens << ", prefilled with reuse " << prefilled << " (cached " << with.cached_tokens
                        << "), without " << without.prompt_tokens - without.cached_tokens);
  CHECK(prefilled <= 1.1 * new_tokens);
  CHECK(prefilled_by_usage(with) == prefilled);
  // The control: without reuse every turn prefills its whole history, far past the bound.
  CHECK(without.cached_tokens == 0);
  CHECK(prefilled_by_usage(without) == without.prompt_tokens);
  CHECK(without.prompt_tokens > 1.1 * new_tokens);

  for (int k = 0; k < kTurns; ++k) {
    CAPTURE(k);
    const json& a = with.responses[static_cast<size_t>(k)];
    const json& b = without.responses[static_cast<size_t>(k)];
    CHECK(a["choices"][0]["text"] == b["choices"][0]["text"]);
    CHECK(a["choices"][0]["finish_reason"] == b["choices"][0]["finish_reason"]);
    CHECK(a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]);
    CHECK(b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
    if (k > 0)  // at least the previous turn's prompt came from the slot's cache
      CHECK(a["usage"]["prompt_tokens_details"]["cached_tokens"].get<size_t>() >= with.prompts[static_cast<size_t>(k - 1)].size());
  }
}

TEST_CASE("a request with cache_prompt false prefills its whole prompt, and a cache_prompt that is not a boolean is refused") {
  const Manifest m = load_manifest("deepseek2", "q4_k_m");
  ServeProcess server(serve_args());
  const json first = post(server.port(), {{"prompt", m.prompt}, {"max_tokens", kAnswerTokens}, {"temperature", 0}});
  CHECK(first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  const json cold =
      post(server.port(), {{"prompt", m.prompt}, {"max_tokens", kAnswerTokens}, {"temperature", 0}, {"cache_prompt", false}});
  CHECK(cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  const json warm = post(server.port(), {{"prompt", m.prompt}, {"max_tokens", kAnswerTokens}, {"temperature", 0}});
  CHECK(warm["usage"]["prompt_tokens_details"]["cached_tokens"] == m.prompt.size() - 1);
  CHECK(warm["choices"][0]["text"] == first["choices"][0]["text"]);
  CHECK(cold["choices"][0]["text"] == first["choices"][0]["text"]);

  httplib::Client c("127.0.0.1", server.port());
  auto res = c.Post("/v1/completions", json{{"prompt", m.prompt}, {"cache_prompt", "yes"}}.dump(), "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(res->body.find("'cache_prompt' must be true or false") != std::string::npos);
}
