// Test helper shared by the scheduler suites: greedy generation of n tokens through a Scheduler.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "app/serve_scheduler.h"

namespace sluice::test {

// Submits `prompt` for n greedy tokens (EOG ignored) and waits for all of them.
inline std::vector<int32_t> generate(core::Scheduler& s, std::vector<int32_t> prompt, int n) {
  core::GenerationParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = n;
  p.sampling.temperature = 0;
  p.stop_at_eog = false;
  auto g = s.submit(std::move(p));
  REQUIRE(g);
  std::vector<int32_t> out;
  while (!g->wait(out, std::chrono::milliseconds(1000))) {
  }
  CHECK(g->finish_reason() == core::FinishReason::length);
  return out;
}

}  // namespace sluice::test
