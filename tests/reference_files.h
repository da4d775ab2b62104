// The reference model files under ../shared/reference, in one list that every suite covering
// them uses (golden logits, free-running greedy, out-of-core engine, prefetch, GPU engine), so
// the suites cannot drift apart or cover a subset.
//
// supported_reference_models() names every model file, split_part_files() the gguf-split parts
// (each opens its whole set). tests/test_cli_greedy.cpp asserts that these two lists plus
// non_model_reference_files() are exactly the .gguf files on disk: a file added to the reference set fails that
// test until it is listed here, and a listed file that disappears fails every suite that runs it.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice::test {

// One loadable reference model: `stem` is the path under reference_dir() without ".gguf"; its
// llama.cpp outputs are stem + ".json" / ".logits.f32".
struct ReferenceModel {
  const char* stem;
  bool kimi_k3;
  std::filesystem::path gguf() const { return reference_dir() / (std::string(stem) + ".gguf"); }
  std::filesystem::path manifest() const { return reference_dir() / (std::string(stem) + ".json"); }
  // "deepseek2-q4_k_m"
  std::string name() const { return std::filesystem::path(stem).filename().string(); }
  bool is_f16() const { return name().ends_with("-f16"); }
};

inline const std::vector<ReferenceModel>& supported_reference_models() {
  static const std::vector<ReferenceModel> models{
      {"tiny/deepseek2/deepseek2-f16", false},  {"tiny/deepseek2/deepseek2-q8_0", false},
      {"tiny/deepseek2/deepseek2-q4_k_m", false}, {"tiny/deepseek2/deepseek2-q2_k", false},
      {"tiny/deepseek2/deepseek2-iq1_s", false},  {"tiny/deepseek2/deepseek2-iq2_xxs", false},
      {"tiny/deepseek2/deepseek2-iq3_xxs", false}, {"tiny/deepseek2/deepseek2-iq4_xs", false},
      {"tiny/deepseek2/deepseek2-tq1_0", false},
      {"tiny/qwen3moe/qwen3moe-f16", false},    {"tiny/qwen3moe/qwen3moe-q4_k_m", false},
      {"tiny/llama-moe/llama-moe-f16", false},  {"tiny/llama-moe/llama-moe-q4_k_m", false},
      {"kimi-k3/kimi-k3-f16", true},            {"kimi-k3/kimi-k3-q8_0", true},
      {"kimi-k3/kimi-k3-q4_k_m", true},
  };
  return models;
}

// The llama-family files (core::LlamaSession); kimi-k3 has its own session.
inline std::vector<ReferenceModel> llama_family_reference_models() {
  std::vector<ReferenceModel> out;
  for (const ReferenceModel& m : supported_reference_models())
    if (!m.kimi_k3) out.push_back(m);
  return out;
}

// llama-gguf-split parts of deepseek2-q4_k_m (../shared/reference/tiny/deepseek2/split): any
// part's path opens the whole set, which equals the unsplit file (tests/test_split_model.cpp
// compares logits bit for bit; tests/test_cli_greedy.cpp runs each part through the CLI).
inline const std::vector<std::string>& split_part_files() {
  static const std::vector<std::string> files{
      "tiny/deepseek2/split/deepseek2-q4_k_m-00001-of-00003.gguf",
      "tiny/deepseek2/split/deepseek2-q4_k_m-00002-of-00003.gguf",
      "tiny/deepseek2/split/deepseek2-q4_k_m-00003-of-00003.gguf",
      "tiny/deepseek2/split/by-size/deepseek2-q4_k_m-00001-of-00004.gguf",
      "tiny/deepseek2/split/by-size/deepseek2-q4_k_m-00002-of-00004.gguf",
      "tiny/deepseek2/split/by-size/deepseek2-q4_k_m-00003-of-00004.gguf",
      "tiny/deepseek2/split/by-size/deepseek2-q4_k_m-00004-of-00004.gguf",
  };
  return files;
}

// GGUF files that are not models (llama.cpp's importance matrix).
inline const std::vector<std::string>& non_model_reference_files() {
  static const std::vector<std::string> files{"tiny/deepseek2/deepseek2-imatrix.gguf"};
  return files;
}

// Every .gguf under reference_dir()/tiny and reference_dir()/kimi-k3, relative, sorted.
inline std::vector<std::string> reference_gguf_files_on_disk() {
  std::vector<std::string> out;
  for (const char* sub : {"tiny", "kimi-k3"}) {
    const auto root = reference_dir() / sub;
    if (!std::filesystem::exists(root)) continue;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root))
      if (e.is_regular_file() && e.path().extension() == ".gguf")
        out.push_back(std::filesystem::relative(e.path(), reference_dir()).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace sluice::test
