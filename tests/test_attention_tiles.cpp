// Tiled prefill attention (core/llama/attention.cpp): query tiles of several tokens sharing each
// pass over a tile of KV cells give the same bits as one token per pass over all its cells.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tests/model_reference.h"

namespace {

using namespace sluice;
using namespace sluice::test;

constexpr int64_t kCtx = 512;


// The prompt in forward() calls of `batch` tokens, then two single-token steps; every logits row.
std::vector<float> prefill(const core::Model& model, const std::vector<int32_t>& tokens, int64_t batch,
                           int64_t tile_tokens, int64_t tile_cells, unsigned threads) {
  kernels::ThreadPool pool(threads);
  core::InCoreExpertSource experts(model);
  core::LlamaSession s(model, experts, pool,
                       {.n_ctx = kCtx, .n_batch = batch, .kv_type = GgmlType::F16, .attn_tile_tokens = tile_tokens,
                        .attn_tile_cells = tile_cells});
  std::vector<float> out;
  for (size_t i = 0; i < tokens.size();) {
    const size_t n = i + 2 >= tokens.size() ? 1 : std::min<size_t>(static_cast<size_t>(batch), tokens.size() - 2 - i);
    auto rows = s.forward({tokens.data() + i, n}, static_cast<int64_t>(i));
    out.insert(out.end(), rows.begin(), rows.end());
    i += n;
  }
  return out;
}

bool memcmp_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::filesystem::path> reference_models() {
  const auto index = nlohmann::json::parse(read_text(reference_dir() / "index.json"));
  std::vector<std::filesystem::path> files;
  for (const auto& m : index["models"])
    if (m["file_shipped"].get<bool>())
      files.push_back(reference_dir() / m["dir"].get<std::string>() / m["file"].get<std::string>());
  return files;
}

}  // namespace

TEST_CASE("tiled prefill attention gives logits memcmp-equal to one token per pass on every reference model") {
  const auto files = reference_models();
  REQUIRE(files.size() >= 12);
  for (const auto& file : files) {
    CAPTURE(file.filename().string());
    const core::Model model = core::Model::load(file.string());
    const auto tokens = long_prompt(model.config().n_vocab, 300);
    // The untiled order: one token per pass, all its cells in one pass.
    const auto untiled = prefill(model, tokens, 128, 1, kCtx, 1);
    REQUIRE(untiled.size() == tokens.size() * static_cast<size_t>(model.config().n_vocab));
    // 16-token tiles over 32-cell passes (several of each per batch), odd sizes that divide
    // nothing, and the defaults on two threads.
    CHECK(memcmp_equal(prefill(model, tokens, 128, 16, 32, 1), untiled));
    CHECK(memcmp_equal(prefill(model, tokens, 128, 5, 7, 1), untiled));
    CHECK(memcmp_equal(prefill(model, tokens, 128, 0, 0, 2), untiled));
  }
}

TEST_CASE("tiles of interleaved sequences in one batch each stay within their sequence") {
  const core::Model model = core::Model::load((tiny_dir("deepseek2") / "deepseek2-q8_0.gguf").string());
  const int64_t V = model.config().n_vocab;
  const auto a = long_prompt(V, 90), b = long_prompt(V / 2, 70);
  // One batch: runs of 30 tokens of a, 20 of b, 30 of a, 50 of b, the rest of a.
  std::vector<int32_t> tokens, seqs;
  std::vector<int64_t> positions;
  size_t ia = 0, ib = 0;
  auto take = [&](int32_t seq, size_t count) {
    for (size_t k = 0; k < count; ++k) {
      const size_t i = seq == 0 ? ia++ : ib++;
      tokens.push_back(seq == 0 ? a[i] : b[i]);
      seqs.push_back(seq);
      positions.push_back(static_cast<int64_t>(i));
    }
  };
  take(0, 30), take(1, 20), take(0, 30), take(1, 50), take(0, 30);
  const std::vector<uint8_t> want(tokens.size(), 1);
  auto run = [&](int64_t tile_tokens, int64_t tile_cells) {
    kernels::ThreadPool pool(2);
    core::InCoreExpertSource experts(model);
    core::LlamaSession s(model, experts, pool,
                         {.n_ctx = kCtx, .n_batch = 256, .kv_type = GgmlType::F16, .n_seq = 2,
                          .attn_tile_tokens = tile_tokens, .attn_tile_cells = tile_cells});
    auto rows = s.forward_batch(tokens, seqs, positions, want);
    return std::vector<float>(rows.begin(), rows.end());
  };
  const auto untiled = run(1, kCtx);
  CHECK(memcmp_equal(run(16, 32), untiled));
  CHECK(memcmp_equal(run(6, 0), untiled));
}

TEST_CASE("an attention tile outside its limits is refused with a line naming it") {
  const core::Model model = core::Model::load((tiny_dir("qwen3moe") / "qwen3moe-f16.gguf").string());
  kernels::ThreadPool pool(1);
  core::InCoreExpertSource experts(model);
  CHECK_THROWS_WITH_AS(core::LlamaSession(model, experts, pool, {.attn_tile_tokens = 17}),
                       doctest::Contains("attention tile of 17 tokens"), Error);
  CHECK_THROWS_WITH_AS(core::LlamaSession(model, experts, pool, {.attn_tile_cells = -1}),
                       doctest::Contains("cells 0 or more"), Error);
}
