// `sluice tokenize`: the CLI prints what the library computes.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/gguf_bytes.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::test::reference_dir;
using sluice::test::run_sluice;

TEST_CASE("sluice tokenize prints the reference prompt's tokens and pieces") {
  const fs::path dir = reference_dir() / "tiny" / "qwen3moe";
  const fs::path model = sluice::test::require_file(dir / "qwen3moe-f16.gguf");
  const auto manifest = nlohmann::json::parse(sluice::test::read_text(dir / "qwen3moe-f16.json"));
  const auto r = run_sluice("tokenize --json '" + model.string() +
                            "' 'The quick brown fox jumps over the lazy dog, then it runs home to sleep.'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto out = nlohmann::json::parse(r.out);
  CHECK(out.at("tokens") == manifest.at("prompt_tokens"));
  CHECK(out.at("pieces_hex") == manifest.at("prompt_pieces_hex"));

  const auto plain = run_sluice("tokenize --no-special '" + model.string() + "' 'Hello world'");
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
  CHECK(plain.out.find(' ') != std::string::npos);  // two ids on one line
}

TEST_CASE("sluice tokenize refuses a file without a vocabulary with one line and exit code 1") {
  const auto dir = sluice::test::temp_dir("tokenize-cli");
  const auto path = dir / "empty.gguf";
  sluice::test::GgufBytes g;
  g.header(3, 0, 1).kv_str("general.architecture", "test");  // valid, but no tokenizer keys
  sluice::test::write_file(path, g.b);
  const auto r = run_sluice("tokenize '" + path.string() + "' hello");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("tokenizer.ggml.model") != std::string::npos, r.err);
}
