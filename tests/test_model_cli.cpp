// `sluice run` end to end: tokenize the reference prompt, greedy-generate 16 tokens and dump
// every logits row; the rows must be llama.cpp's.
#include <doctest/doctest.h>

#include <cstring>

#include "tests/model_files.h"

using namespace sluice::test;

TEST_CASE("sluice run reproduces llama.cpp's greedy continuation and logits from prompt text") {
  for (const char* arch : {"llama-moe", "deepseek2"}) {
    const Manifest m = load_manifest(arch, "f32");
    const auto out = temp_dir("cli") / "logits.f32";
    const auto model = tiny_dir(arch) / (std::string(arch) + "-f16.gguf");
    const auto r = run_sluice("run -m '" + model.string() + "' -p '" + m.json["prompt_text"].get<std::string>() +
                              "' -n 16 --widen-f16 --kv-type f32 -c 128 --ignore-eos --logits-out '" + out.string() + "'");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::string gen;
    for (const auto& piece : m.json["gen_pieces_hex"]) {  // exact bytes (pieces may split UTF-8)
      const std::string hex = piece.get<std::string>();
      for (size_t i = 0; i + 1 < hex.size(); i += 2) gen += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    CHECK_MESSAGE(r.out.find(require_text(gen, "llama.cpp's continuation")) != std::string::npos, r.out);
    CHECK(r.err.find("tok/s") != std::string::npos);
    const auto bytes = read_file(out);
    std::vector<float> logits(bytes.size() / 4);
    std::memcpy(logits.data(), bytes.data(), logits.size() * 4);
    const double d = max_abs_diff(logits, m.logits);
    MESSAGE(std::string(arch) << ": sluice run --logits-out vs llama.cpp f32: max |logit diff| " << d);
    // Measured 0 for both: the rows are llama.cpp's to the bit.
    REQUIRE(bytes.size() == m.logits.size() * 4);
    CHECK(std::memcmp(bytes.data(), m.logits.data(), bytes.size()) == 0);
  }
}
