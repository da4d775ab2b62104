// In-core runs that use the weights in place in a read-only mapping of the file (EngineOptions::
// map_file, the CLI's default for --in-core) give the logits of the run that reads them into the
// weight arena, bit for bit, on every reference model and on a split set; the mapping is real (the
// file shows in /proc/self/maps while the engine lives, and only then).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/engine.h"
#include "tests/reference_files.h"
#include "tests/test_support.h"

using sluice::core::Engine;
using sluice::core::EngineOptions;
namespace fs = std::filesystem;

namespace {

bool mapped_by_this_process(const fs::path& file) {
  return sluice::test::read_text("/proc/self/maps").find(fs::canonical(file).string()) != std::string::npos;
}

// The prompt in one batch, then two tokens alone: every row's logits.
std::vector<float> logits(Engine& e, const std::vector<int32_t>& prompt) {
  const auto rows = e.forward(prompt, 0);
  std::vector<float> all(rows.begin(), rows.end());
  for (size_t s = 0; s < 2; ++s) {
    const int32_t t = prompt[s];
    auto row = e.forward({&t, 1}, static_cast<int64_t>(prompt.size() + s));
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

void check_mapped_equals_read(const fs::path& gguf, const fs::path& manifest, const std::vector<fs::path>& files) {
  CAPTURE(gguf.string());
  const auto j = nlohmann::json::parse(sluice::test::read_text(manifest));
  const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
  EngineOptions o;
  o.model_path = gguf.string();
  o.in_core = true;
  o.session.n_ctx = 64;
  o.session.kv_type = sluice::GgmlType::F32;
  o.threads = 2;
  std::vector<float> read, mapped;
  {
    Engine e(o);
    for (const fs::path& f : files) CHECK_FALSE(mapped_by_this_process(f));
    read = logits(e, prompt);
  }
  o.map_file = true;
  {
    Engine e(o);
    for (const fs::path& f : files) CHECK_MESSAGE(mapped_by_this_process(f), f.string());
    mapped = logits(e, prompt);
  }
  for (const fs::path& f : files) CHECK_FALSE(mapped_by_this_process(f));  // unmapped with the engine
  REQUIRE(read.size() == mapped.size());
  CHECK(std::memcmp(read.data(), mapped.data(), read.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("in-core weights mapped from the file give the logits of weights read into RAM, bit for bit") {
  for (const auto& m : sluice::test::supported_reference_models()) check_mapped_equals_read(m.gguf(), m.manifest(), {m.gguf()});
}

TEST_CASE("a split set maps every part, with the logits of the set read into RAM") {
  const fs::path dir = sluice::test::reference_dir() / "tiny/deepseek2/split";
  std::vector<fs::path> parts;
  for (int i = 1; i <= 3; ++i) parts.push_back(dir / ("deepseek2-q4_k_m-0000" + std::to_string(i) + "-of-00003.gguf"));
  check_mapped_equals_read(parts[1], sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.json", parts);
}
