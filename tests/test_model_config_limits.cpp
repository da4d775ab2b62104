// The hyperparameter bound of llama-family files (core/llama/model_config.cpp): a size or count
// above 2^30 describes no real model and is refused by name, before any product of two of them
// can overflow; 2^30 itself is accepted.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "common/error.h"
#include "core/llama/model_config.h"
#include "tests/model_files.h"

namespace {

using namespace sluice;

constexpr uint32_t kLimit = 1u << 30;

// A copy of the tiny deepseek2 file with `key` set to `value`.
std::filesystem::path with_value(test::SourceModel& src, const std::string& key, uint32_t value) {
  return test::write_modified(src, "limit-" + std::to_string(value), [&](core::GgufWriter& w) { w.set_u32(key, value); });
}

}  // namespace

TEST_CASE("a llama-family hyperparameter of 2^30 is accepted and one of 2^30 + 1 is refused by key and value") {
  test::SourceModel src(test::tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf");
  // context_length: a count no tensor shape checks, so only the bound can refuse it.
  const std::string key = "deepseek2.context_length";

  const auto at_limit = with_value(src, key, kLimit);
  {
    io::PreadReader reader(at_limit.string());
    const core::ModelConfig c = core::ModelConfig::from_gguf(core::GgufFile::parse(reader));
    CHECK(c.n_ctx_train == int64_t{kLimit});
  }

  const auto over = with_value(src, key, kLimit + 1);
  io::PreadReader reader(over.string());
  const core::GgufFile file = core::GgufFile::parse(reader);
  try {
    (void)core::ModelConfig::from_gguf(file);
    FAIL("context_length = 2^30 + 1 was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()) ==
          "key 'deepseek2.context_length' = 1073741825 is out of range in '" + over.string() + "'");
  }

  // At the CLI boundary: one line naming the key, exit 1, nothing on stdout.
  const auto r = test::run_sluice("run -m '" + over.string() + "' --tokens 1,2,3 -n 1");
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(r.err == "sluice run: error: key 'deepseek2.context_length' = 1073741825 is out of range in '" + over.string() +
                     "'\n");
  std::filesystem::remove_all(at_limit.parent_path());
  std::filesystem::remove_all(over.parent_path());
}
