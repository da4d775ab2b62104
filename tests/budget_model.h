// The model the budget tests measure (test_budget_rss.cpp, test_cgroup_budget.cpp): big enough
// that a run ignoring --budget cannot pass them.
//
// `sluice synth --preset qwen3-30b-a3b --layers 2 --experts 96 --vocab <tiny qwen3moe>`:
// Qwen3-30B-A3B's real layer shapes (2048 wide, experts of 768, 8 routed per token) in two MoE
// blocks of 96 experts, about 530 MiB of routed experts at Q4_K_M, and the tiny reference's
// 2048-token vocabulary, so that what must stay resident (embeddings, attention, routers, output)
// is small next to the budget. Written once into <source>/data/ (git-ignored) and reused; a
// concurrent first use writes its own temporary file and renames it into place.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include "core/gguf/gguf.h"
#include "core/gguf/model_summary.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace sluice::test {

// Everything the budget tests state in one place.
inline constexpr uint64_t kBudgetTestBudget = 128ull << 20;   // --budget 128M
inline constexpr uint64_t kBudgetTestMinRouted = 512ull << 20;  // routed experts in the file, at least

inline std::filesystem::path budget_model() {
  static const std::filesystem::path path = [] {
    namespace fs = std::filesystem;
    const fs::path dir = source_dir() / "data";
    const fs::path model = dir / "budget-qwen3-30b-2x96.gguf";
    if (!fs::exists(model)) {
      fs::create_directories(dir);
      const fs::path tmp = dir / ("budget-qwen3-30b-2x96.gguf.tmp" + std::to_string(::getpid()));
      const fs::path vocab = reference_dir() / "tiny/qwen3moe/qwen3moe-q4_k_m.gguf";
      auto r = run_sluice("synth -q --preset qwen3-30b-a3b --layers 2 --experts 96 --seed 7 --vocab '" + vocab.string() +
                          "' -o '" + tmp.string() + "'");
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      fs::rename(tmp, model);
    }
    io::PreadReader reader(model.string());
    const core::ModelSummary s = core::summarize(core::GgufFile::parse(reader));
    REQUIRE_MESSAGE(s.routed_expert_bytes >= kBudgetTestMinRouted,
                    model.string() << " holds only " << s.routed_expert_bytes << " bytes of routed experts");
    return model;
  }();
  return path;
}

}  // namespace sluice::test
