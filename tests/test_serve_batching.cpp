// Continuous batching, measured: concurrent requests to one `sluice serve` share forward passes
// (more than one generated token per decode step) and share expert reads (more than one routed
// token per distinct expert of a MoE layer), read from /metrics before and after, with the
// experts streamed through a 25% cache and in core. The same requests one at a time
// (--parallel 1) give exactly one token per step and per expert: the control that shows the
// measure can fail.
#include <doctest/doctest.h>

#include <httplib.h>

#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/model_reference.h"
#include "tests/serve_metrics.h"
#include "tests/serve_process.h"

namespace {

using namespace sluice::test;
using nlohmann::json;

std::string model_path() { return (tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf").string(); }

struct Shares {
  double steps = 0, decode_steps = 0, decode_tokens = 0, routed_pairs = 0, distinct_experts = 0;
  double tokens_per_decode_step() const { return decode_steps > 0 ? decode_tokens / decode_steps : 0; }
  double tokens_per_expert_read() const { return distinct_experts > 0 ? routed_pairs / distinct_experts : 0; }
};

// Sends every prompt at once (greedy, a fixed length each) and returns what the steps shared.
Shares run_concurrently(const std::vector<std::string>& serve_args, const std::vector<std::string>& prompts) {
  ServeProcess server(serve_args);
  const auto before = read_metrics(server.port());
  std::vector<std::future<int>> answers;
  for (const auto& p : prompts) {
    answers.push_back(std::async(std::launch::async, [&server, p] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(120, 0);
      auto res = c.Post("/v1/completions",
                        json{{"prompt", p}, {"max_tokens", 24}, {"temperature", 0}}.dump(),
                        "application/json");
      return res ? res->status : -1;
    }));
  }
  for (auto& a : answers) CHECK(a.get() == 200);
  const auto after = read_metrics(server.port());
  auto delta = [&](const char* name) {
    REQUIRE_MESSAGE(after.count(name), "/metrics has no " << name);
    return after.at(name) - (before.count(name) ? before.at(name) : 0);
  };
  CHECK(delta("sluice_requests_finished_total") == static_cast<double>(prompts.size()));
  Shares s;
  s.steps = delta("sluice_steps_total");
  s.decode_steps = delta("sluice_decode_steps_total");
  s.decode_tokens = delta("sluice_decode_tokens_total");
  s.routed_pairs = delta("sluice_routed_pairs_total");
  s.distinct_experts = delta("sluice_distinct_experts_total");
  MESSAGE("steps " << s.steps << ", decode steps " << s.decode_steps << ", decode tokens " << s.decode_tokens
                   << " (" << s.tokens_per_decode_step() << " per step), routed pairs " << s.routed_pairs
                   << " over distinct experts " << s.distinct_experts << " (" << s.tokens_per_expert_read()
                   << " tokens per expert read)");
  return s;
}

const std::vector<std::string> kPrompts{"Once upon a time", "1, 2, 3, 4,", "The quick brown fox", "In the beginning"};

std::vector<std::string> serve_args(const std::string& memory, int parallel) {
  std::vector<std::string> a{"-m", model_path(), "--chat-template", "chatml", "--parallel", std::to_string(parallel), "-c", "128"};
  if (memory == "in-core") a.push_back("--in-core");
  else a.insert(a.end(), {"--cache-experts", memory});
  return a;
}

}  // namespace

TEST_CASE("concurrent requests to sluice serve share decode steps and expert reads, streamed and in core") {
  for (const std::string memory : {"25%", "in-core"}) {
    CAPTURE(memory);
    const Shares s = run_concurrently(serve_args(memory, 4), kPrompts);
    CHECK(s.decode_steps > 0);
    // Four requests of 24 tokens: fewer decode passes than tokens, so passes carried several.
    CHECK(s.tokens_per_decode_step() > 1.5);
    CHECK(s.steps < s.decode_tokens);
    // Tokens of one pass that route to the same expert share its read (and its matmul).
    CHECK(s.tokens_per_expert_read() > 1.0);
  }
}

TEST_CASE("requests to sluice serve --parallel 1 take one token per decode step and per expert read (the control)") {
  const Shares s = run_concurrently(serve_args("25%", 1), kPrompts);
  CHECK(s.decode_steps > 0);
  CHECK(s.tokens_per_decode_step() == doctest::Approx(1.0));
  CHECK(s.tokens_per_expert_read() == doctest::Approx(1.0));
}
