// The out-of-core invariant: streaming experts through a budgeted cache changes nothing in the
// numbers. Every reference model, at budgets from the minimum to unlimited, with both readers,
// gives logits bit-identical to the in-core run.
#include <doctest/doctest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/engine.h"
#include "tests/test_support.h"

using sluice::core::Engine;
using sluice::core::EngineOptions;

namespace {

struct Tokens {
  std::vector<int32_t> prompt, gen;
};

Tokens manifest_tokens(const std::string& stem) {
  auto j = nlohmann::json::parse(sluice::test::read_text(sluice::test::reference_dir() / (stem + ".json")));
  return {j["prompt_tokens"].get<std::vector<int32_t>>(), j["gen_tokens"].get<std::vector<int32_t>>()};
}

// Teacher-forced logits of every row: the prompt as one batch, then each generated token alone.
std::vector<float> teacher_forced_logits(Engine& engine, const Tokens& t) {
  std::vector<float> all;
  auto rows = engine.session().forward(t.prompt, 0);
  all.insert(all.end(), rows.begin(), rows.end());
  for (size_t s = 0; s < t.gen.size(); ++s) {
    auto row = engine.session().forward({&t.gen[s], 1}, static_cast<int64_t>(t.prompt.size() + s));
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

EngineOptions options_for(const std::string& stem) {
  EngineOptions o;
  o.model_path = (sluice::test::reference_dir() / (stem + ".gguf")).string();
  o.session.n_ctx = 64;
  o.session.kv_type = sluice::GgmlType::F32;
  o.threads = 2;
  return o;
}

const char* const kModels[] = {
    "tiny/deepseek2/deepseek2-q4_k_m", "tiny/deepseek2/deepseek2-q2_k", "tiny/deepseek2/deepseek2-f16",
    "tiny/qwen3moe/qwen3moe-q4_k_m",   "tiny/llama-moe/llama-moe-q4_k_m",
};

}  // namespace

TEST_CASE("streamed experts give logits bit-identical to the in-core run at every budget and with both readers") {
  for (const char* stem : kModels) {
    CAPTURE(stem);
    Tokens tokens = manifest_tokens(stem);
    EngineOptions in_core = options_for(stem);
    in_core.in_core = true;
    std::vector<float> reference;
    {
      Engine e(in_core);
      CHECK(e.cache() == nullptr);
      reference = teacher_forced_logits(e, tokens);
    }

    // The minimum budget, from an unlimited engine's own accounting.
    uint64_t minimum = 0, unlimited_total = 0;
    {
      Engine e(options_for(stem));
      minimum = e.budget().minimum();
      unlimited_total = e.budget().total();
      auto logits = teacher_forced_logits(e, tokens);
      REQUIRE(logits.size() == reference.size());
      CHECK(std::memcmp(logits.data(), reference.data(), logits.size() * sizeof(float)) == 0);
      CHECK(e.cache()->stats().total.evictions == 0);
    }
    MESSAGE(std::string(stem), ": minimum budget ", minimum, " bytes, unlimited ", unlimited_total, " bytes");
    CHECK(minimum < unlimited_total);

    for (auto kind : {sluice::io::IoKind::uring, sluice::io::IoKind::pread}) {
      for (uint64_t budget : {minimum, minimum + (unlimited_total - minimum) / 3, unlimited_total}) {
        CAPTURE(budget);
        CAPTURE(sluice::io::to_string(kind));
        EngineOptions o = options_for(stem);
        o.budget_bytes = budget;
        o.io.kind = kind;
        Engine e(o);
        CHECK(e.budget().total() <= budget);
        auto logits = teacher_forced_logits(e, tokens);
        REQUIRE(logits.size() == reference.size());
        CHECK(std::memcmp(logits.data(), reference.data(), logits.size() * sizeof(float)) == 0);
        auto stats = e.cache()->stats();
        if (budget == minimum) CHECK(stats.total.evictions > 0);
        CHECK(stats.total.bytes_read > 0);
        CHECK(stats.arena_bytes <= budget);
      }
    }
  }
}

TEST_CASE("a budget below the minimum is refused with the minimum and its parts in the message") {
  const std::string stem = "tiny/deepseek2/deepseek2-q4_k_m";
  uint64_t minimum = 0;
  {
    Engine e(options_for(stem));
    minimum = e.budget().minimum();
  }
  EngineOptions o = options_for(stem);
  o.budget_bytes = minimum - 1;
  try {
    Engine e(o);
    FAIL("a budget below the minimum was accepted");
  } catch (const sluice::Error& err) {
    CHECK(err.code() == sluice::ErrorCode::budget);
    std::string m = err.what();
    CHECK(m.find("below the minimum") != std::string::npos);
    CHECK(m.find("one MoE layer's experts") != std::string::npos);
  }
  o.budget_bytes = 1 << 20;  // 1 MiB cannot even hold the resident weights
  CHECK_THROWS_WITH_AS(Engine{o}, doctest::Contains("cannot hold"), sluice::Error);
}

TEST_CASE("--cache-experts sizes the budget so the arena holds that fraction of the routed experts") {
  EngineOptions o = options_for("tiny/deepseek2/deepseek2-q4_k_m");
  o.cache_experts = 0.5;
  Engine e(o);
  const auto& b = e.budget();
  CHECK(b.budget == b.total());
  double share = static_cast<double>(b.expert_arena) / static_cast<double>(b.routed_expert_bytes);
  CHECK(share > 0.45);
  CHECK(share < 0.75);  // slots are padded to 4 KiB per tensor slice
  CHECK(e.describe_budget().find("expert cache") != std::string::npos);
}
