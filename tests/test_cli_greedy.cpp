// Free-running greedy generation through the CLI, next to the teacher-forced golden tests: on
// every reference model file sluice loads, `sluice run --kv-type f32 --temp 0` from llama.cpp's
// prompt ids prints llama.cpp's 16 greedy pieces, and its own logits (--logits-out) pick
// llama.cpp's token ids. Plus the bookkeeping that keeps tests/reference_files.h honest: the
// listed files are exactly those on disk, and each gguf-split part runs as its whole set.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"
#include "io/pread_reader.h"
#include "tests/reference_files.h"

namespace {

using namespace sluice::test;
namespace fs = std::filesystem;

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t t : ids) s += (s.empty() ? "" : ",") + std::to_string(t);
  return s;
}

std::string listing(const std::vector<std::string>& files) {
  std::string s;
  for (const auto& f : files) s += "\n  " + f;
  return s;
}

// One free-running run of `model` compared with llama.cpp's outputs in `manifest`.
void check_greedy(const fs::path& model, const fs::path& manifest, bool widen) {
  CAPTURE(manifest.string());
  const auto j = nlohmann::json::parse(read_text(manifest));
  const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
  const auto gen = j["gen_tokens"].get<std::vector<int32_t>>();
  const int64_t n_vocab = j["logits_shape"][1].get<int64_t>();
  // llama.cpp's pieces as exact bytes (a piece may be part of a UTF-8 sequence). It rendered
  // control tokens (e.g. <|endoftext|>) as text; `sluice run` prints them as nothing, as
  // llama_token_to_piece does with special = false: those are left out of the expected text
  // (their ids are still compared below).
  sluice::io::PreadReader reader(model.string());
  const sluice::core::Tokenizer tok = sluice::core::Tokenizer::from_gguf(sluice::core::GgufFile::parse(reader));
  std::string pieces;
  for (size_t s = 0; s < gen.size(); ++s) {
    const std::string hex = j["gen_pieces_hex"][s].get<std::string>();
    std::string piece;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) piece += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    const bool control = tok.token_to_piece(gen[s], false).empty() && tok.token_to_piece(gen[s], true) == piece;
    if (!control) pieces += piece;
  }
  REQUIRE(gen.size() == 16);
  require_text(pieces, "llama.cpp's continuation");

  const fs::path logits_path = temp_dir("greedy") / "logits.f32";
  const CommandResult r = run_sluice("run -m '" + model.string() + "' --tokens " + join_ids(prompt) + " -n " +
                                     std::to_string(gen.size()) + " --kv-type f32 --temp 0 --ignore-eos -t 2" +
                                     (widen ? " --widen-f16" : "") + " --logits-out '" + logits_path.string() + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  require_text(r.out, "sluice run's continuation");
  CHECK(r.out == pieces + "\n");

  // The tokens the run chose: the argmax of the row before each generated token.
  const std::vector<uint8_t> raw = read_file(logits_path);
  const size_t rows = prompt.size() + gen.size();
  REQUIRE(raw.size() == rows * static_cast<size_t>(n_vocab) * sizeof(float));
  std::vector<float> logits(raw.size() / sizeof(float));
  std::memcpy(logits.data(), raw.data(), raw.size());
  std::vector<int32_t> chosen;
  for (size_t s = 0; s < gen.size(); ++s) {
    const float* row = logits.data() + (prompt.size() - 1 + s) * static_cast<size_t>(n_vocab);
    chosen.push_back(static_cast<int32_t>(std::max_element(row, row + n_vocab) - row));
  }
  CHECK(chosen == gen);
  fs::remove_all(logits_path.parent_path());
}

}  // namespace

TEST_CASE("the reference model lists name exactly the GGUF files in ../shared/reference") {
  const std::vector<std::string> on_disk = reference_gguf_files_on_disk();
  std::vector<std::string> listed;
  for (const auto& f : split_part_files()) listed.push_back(f);
  for (const auto& f : non_model_reference_files()) listed.push_back(f);
  for (const ReferenceModel& m : supported_reference_models()) listed.push_back(std::string(m.stem) + ".gguf");
  std::sort(listed.begin(), listed.end());
  std::vector<std::string> unlisted, missing;
  std::set_difference(on_disk.begin(), on_disk.end(), listed.begin(), listed.end(), std::back_inserter(unlisted));
  std::set_difference(listed.begin(), listed.end(), on_disk.begin(), on_disk.end(), std::back_inserter(missing));
  INFO("on disk but in no list of tests/reference_files.h (add it to the supported or split-part list):",
       listing(unlisted));
  INFO("listed but absent from ", reference_dir().string(), ":", listing(missing));
  CHECK(unlisted.empty());
  CHECK(missing.empty());
}

TEST_CASE("sluice run on any gguf-split part prints the unsplit file's text") {
  const std::string prompt = " -p 'The quick brown fox' -n 8 --temp 0 --kv-type f32 --in-core";
  const CommandResult whole = run_sluice("run -m '" + (reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string() + "'" + prompt);
  REQUIRE(whole.exit_code == 0);
  // run -p prints the prompt before the continuation.
  REQUIRE(whole.out.starts_with("The quick brown fox"));
  require_text(whole.out.substr(19), "the unsplit file's continuation");
  for (const std::string& part : split_part_files()) {
    CAPTURE(part);
    const CommandResult r = run_sluice("run -m '" + (reference_dir() / part).string() + "'" + prompt);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == whole.out);
  }
}

TEST_CASE("sluice run --temp 0 --kv-type f32, free-running, prints llama.cpp's greedy tokens on every reference file") {
  for (const ReferenceModel& m : supported_reference_models()) {
    check_greedy(m.gguf(), m.manifest(), false);
    // An F16 file run in f32 math (--widen-f16) against llama.cpp's run of the F32 master.
    if (m.is_f16()) {
      std::string f32 = m.manifest().string();
      f32.replace(f32.rfind("-f16.json"), 9, "-f32.json");
      check_greedy(m.gguf(), f32, true);
    }
  }
}
