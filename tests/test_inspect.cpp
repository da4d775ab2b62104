#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/gguf/gguf.h"
#include "core/gguf/model_summary.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::test::reference_dir;
using sluice::test::run_sluice;

namespace {

nlohmann::json inspect_json(const fs::path& path, const std::string& extra = "") {
  auto r = run_sluice("inspect --json " + extra + " '" + path.string() + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return nlohmann::json::parse(r.out);
}

sluice::core::ModelSummary summarize_file(const fs::path& path) {
  sluice::io::PreadReader reader(path.string());
  return sluice::core::summarize(sluice::core::GgufFile::parse(reader));
}

struct Expected {
  const char* file;
  uint64_t tensors;
  uint64_t routed_bytes;   // n_moe_layers x n_expert x 3 x rows x cols x 2 bytes (F16)
  uint64_t shard_bytes;    // 3 x rows x cols x 2
  uint64_t shared_bytes;
  uint32_t n_expert, n_expert_used;
  size_t moe_layers;
};

}  // namespace

TEST_CASE("inspect reports the sizes that the reference models' dimensions imply") {
  // Dimensions from shared/reference/README.md and kimi-k3/README.md.
  const Expected cases[] = {
      {"tiny/deepseek2/deepseek2-f16.gguf", 52, 2ull * 16 * 3 * 256 * 256 * 2, 3ull * 256 * 256 * 2,
       2ull * 3 * 256 * 256 * 2, 16, 4, 2},
      {"tiny/qwen3moe/qwen3moe-f16.gguf", 27, 2ull * 8 * 3 * 256 * 256 * 2, 3ull * 256 * 256 * 2, 0, 8, 2, 2},
      {"tiny/llama-moe/llama-moe-f16.gguf", 23, 2ull * 4 * 3 * 256 * 512 * 2, 3ull * 256 * 512 * 2, 0, 4, 2, 2},
      {"kimi-k3/kimi-k3-f16.gguf", 107, 3ull * 8 * 3 * 256 * 256 * 2, 3ull * 256 * 256 * 2,
       3ull * 3 * 256 * 512 * 2, 8, 3, 3},
  };
  for (const Expected& e : cases) {
    CAPTURE(e.file);
    nlohmann::json j = inspect_json(reference_dir() / e.file);
    CHECK(j["tensor_count"] == e.tensors);
    CHECK(j["routed_expert_bytes"] == e.routed_bytes);
    CHECK(j["expert_shard_bytes"] == e.shard_bytes);
    CHECK(j["bytes_by_class"]["shared experts"] == e.shared_bytes);
    CHECK(j["n_expert"] == e.n_expert);
    CHECK(j["n_expert_used"] == e.n_expert_used);
    CHECK(j["moe_layers"].size() == e.moe_layers);
    CHECK(j["routed_bytes_per_token"] == e.n_expert_used * e.moe_layers * e.shard_bytes);
    CHECK(j["file_bytes"] == fs::file_size(reference_dir() / e.file));
    // Every byte of tensor data is either routed or resident; only alignment padding is neither.
    uint64_t data = j["file_bytes"].get<uint64_t>() - j["data_offset"].get<uint64_t>();
    uint64_t counted = j["routed_expert_bytes"].get<uint64_t>() + j["resident_bytes"].get<uint64_t>();
    CHECK(counted <= data);
    CHECK(data - counted < 32 * e.tensors);
  }
}

TEST_CASE("quantized shard sizes follow the tensor types recorded by llama.cpp") {
  const char* files[] = {"tiny/deepseek2/deepseek2-q4_k_m", "tiny/deepseek2/deepseek2-q2_k",
                         "tiny/deepseek2/deepseek2-q8_0", "tiny/qwen3moe/qwen3moe-q4_k_m",
                         "tiny/llama-moe/llama-moe-q4_k_m"};
  for (const char* stem : files) {
    CAPTURE(stem);
    auto manifest = nlohmann::json::parse(sluice::test::read_text(reference_dir() / (std::string(stem) + ".json")));
    auto summary = summarize_file(reference_dir() / (std::string(stem) + ".gguf"));
    sluice::io::PreadReader reader((reference_dir() / (std::string(stem) + ".gguf")).string());
    auto file = sluice::core::GgufFile::parse(reader);
    for (const auto& layer : summary.moe_layers) {
      uint64_t expected = 0;
      for (const char* part : {"gate", "up", "down"}) {
        std::string name = "blk." + std::to_string(layer.layer) + ".ffn_" + part + "_exps.weight";
        auto type = sluice::ggml_type_from_name(manifest["tensor_type_by_name"][name].get<std::string>());
        REQUIRE(type.has_value());
        const auto& t = file.tensor(name);
        CHECK(t.type == *type);
        expected += sluice::ggml_row_bytes(*type, static_cast<uint64_t>(t.ne[0])) * static_cast<uint64_t>(t.ne[1]);
      }
      CHECK(layer.shard_bytes == expected);
    }
    CHECK(summary.tensor_count == manifest["tensor_type_by_name"].size());
  }
}

TEST_CASE("kimi-k3 latent projections and routers are resident and only expert tensors are routed") {
  auto j = inspect_json(reference_dir() / "kimi-k3/kimi-k3-q8_0.gguf", "--tensors");
  for (const auto& t : j["tensors"]) {
    std::string name = t["name"];
    bool routed = sluice::core::classify_tensor(name) == sluice::core::TensorClass::routed_experts;
    CHECK_MESSAGE(routed == (name.find("_exps.") != std::string::npos), name);
    if (name.find("ffn_routed_") != std::string::npos || name.find("ffn_gate_inp") != std::string::npos) {
      CHECK(!routed);
    }
  }
  CHECK(j["bytes_by_class"]["MoE latent projections"].get<uint64_t>() > 0);
  // Runnable is the registry's word (core/architectures.h), not a list of names of its own.
  CHECK(j["runnable"] == true);
}

TEST_CASE("inspect --tensors lists name, ggml type spelling, ggml-order shape, relative offset and bytes") {
  auto j = inspect_json(reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf", "--tensors");
  bool found = false;
  for (const auto& t : j["tensors"]) {
    if (t["name"] != "blk.1.ffn_up_exps.weight") continue;
    found = true;
    CHECK(t["type"] == "q4_K");
    CHECK(t["shape"] == nlohmann::json::array({256, 256, 16}));
    CHECK(t["bytes"] == 16 * 256 * 144);
    CHECK(t["offset"].get<uint64_t>() % 32 == 0);
  }
  CHECK(found);
}

TEST_CASE("inspect prints the generic part of files that are not models it runs") {
  for (const char* f : {"kernels/kernels.gguf", "tokenizer/ggml-vocab-qwen2.gguf", "tokenizer/ggml-vocab-llama-spm.gguf"}) {
    CAPTURE(f);
    auto r = run_sluice("inspect '" + (reference_dir() / f).string() + "'");
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("not a model sluice runs") != std::string::npos);
    CHECK(r.out.find("metadata:") != std::string::npos);
  }
  auto text = run_sluice("inspect '" + (reference_dir() / "tiny/qwen3moe/qwen3moe-f16.gguf").string() + "'");
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("not a model sluice runs") == std::string::npos);
  CHECK(text.out.find("disk-bound decode ceiling at 3.0 GB/s") != std::string::npos);
}

TEST_CASE("the decode ceiling follows disk bandwidth over routed bytes per token") {
  auto j = inspect_json(reference_dir() / "tiny/llama-moe/llama-moe-f16.gguf", "--disk-gbps 7");
  double bytes = j["routed_bytes_per_token"].get<double>();
  REQUIRE(j["decode_ceilings"].size() == 3);
  CHECK(j["decode_ceilings"][0]["tok_s"].get<double>() == doctest::Approx(7e9 / bytes));
  CHECK(j["decode_ceilings"][2]["tok_s"].get<double>() == doctest::Approx(7e9 / (0.1 * bytes)));
}

TEST_CASE("inspect fails with one clear line on bad input") {
  auto missing = run_sluice("inspect /nonexistent.gguf");
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("cannot open '/nonexistent.gguf'") != std::string::npos);
  auto bad_flag = run_sluice("inspect --no-such-flag x.gguf");
  CHECK(bad_flag.exit_code == 2);
  CHECK(bad_flag.err.find("no-such-flag") != std::string::npos);
  auto dir = sluice::test::temp_dir("inspect");
  sluice::test::write_file(dir / "junk.gguf", std::vector<uint8_t>(100, 7));
  auto junk = run_sluice("inspect '" + (dir / "junk.gguf").string() + "'");
  CHECK(junk.exit_code == 1);
  CHECK(junk.err.find("bad magic") != std::string::npos);
  CHECK(std::count(junk.err.begin(), junk.err.end(), '\n') == 1);
  auto unknown = run_sluice("frobnicate");
  CHECK(unknown.exit_code == 2);
}
