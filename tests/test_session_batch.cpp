// Continuous batching: tokens of several sequences in one forward_batch() give what each
// sequence gets alone (Session::forward), with prefill of one sequence mixed into decode steps
// of the others.
#include <doctest/doctest.h>

#include <cstring>

#include "common/error.h"
#include "tests/model_reference.h"
#include "core/compute/matmul.h"
#include "core/llama/in_core_experts.h"

namespace {

using namespace sluice;
using namespace sluice::test;

struct Run {
  std::vector<int32_t> tokens;  // generated, greedy
  std::vector<float> logits;    // last prompt row, then one row per decode step
};

constexpr int kSteps = 5;

// One sequence alone: prompt in one call, then greedy decode one token at a time.
Run run_alone(const core::Model& model, const std::vector<int32_t>& prompt) {
  kernels::ThreadPool pool(1);
  core::InCoreExpertSource experts(model);
  core::LlamaSession s(model, experts, pool, {.n_ctx = 128, .n_batch = 64, .kv_type = GgmlType::F16});
  const int64_t V = model.config().n_vocab;
  Run r;
  auto rows = s.forward(prompt, 0, false);
  r.logits.assign(rows.begin(), rows.end());
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int i = 0; i < kSteps; ++i) {
    const int32_t tok = argmax(r.logits.data() + i * V, V);
    r.tokens.push_back(tok);
    auto row = s.forward({&tok, 1}, pos++);
    r.logits.insert(r.logits.end(), row.begin(), row.end());
  }
  return r;
}

// Sequence q starts its prefill at step q (in the same pass as the decode tokens of the earlier
// sequences); every started sequence decodes one token per step.
std::vector<Run> run_batched(const core::Model& model, const std::vector<std::vector<int32_t>>& prompts) {
  kernels::ThreadPool pool(1);
  core::InCoreExpertSource experts(model);
  const int64_t S = static_cast<int64_t>(prompts.size());
  core::LlamaSession s(model, experts, pool, {.n_ctx = 128, .n_batch = 64, .kv_type = GgmlType::F16, .n_seq = S});
  const int64_t V = model.config().n_vocab;
  std::vector<Run> runs(prompts.size());
  std::vector<int64_t> pos(prompts.size(), 0);
  for (int step = 0; step < kSteps + S; ++step) {
    std::vector<int32_t> toks, seqs;
    std::vector<int64_t> positions;
    std::vector<uint8_t> want;
    std::vector<int32_t> owner;  // sequence of each logits row
    for (int64_t q = 0; q < S && q <= step; ++q) {
      Run& r = runs[static_cast<size_t>(q)];
      if (q == step) {  // prefill
        for (size_t i = 0; i < prompts[q].size(); ++i) {
          toks.push_back(prompts[q][i]);
          seqs.push_back(static_cast<int32_t>(q));
          positions.push_back(pos[q]++);
          want.push_back(i + 1 == prompts[q].size());
        }
      } else if (static_cast<int>(r.tokens.size()) < kSteps) {
        const int32_t tok = argmax(r.logits.data() + r.tokens.size() * V, V);
        r.tokens.push_back(tok);
        toks.push_back(tok);
        seqs.push_back(static_cast<int32_t>(q));
        positions.push_back(pos[q]++);
        want.push_back(1);
      } else {
        continue;
      }
      owner.push_back(static_cast<int32_t>(q));
    }
    if (toks.empty()) continue;
    auto rows = s.forward_batch(toks, seqs, positions, want);
    REQUIRE(rows.size() == owner.size() * static_cast<size_t>(V));
    for (size_t i = 0; i < owner.size(); ++i)
      runs[static_cast<size_t>(owner[i])].logits.insert(runs[static_cast<size_t>(owner[i])].logits.end(),
                                                         rows.begin() + static_cast<int64_t>(i) * V,
                                                         rows.begin() + static_cast<int64_t>(i + 1) * V);
  }
  return runs;
}

std::vector<std::vector<int32_t>> prompts_from(const Manifest& m) {
  // Three different prompts: the reference prompt, its tail, and prompt + generated tokens.
  std::vector<int32_t> all = m.prompt;
  all.insert(all.end(), m.gen.begin(), m.gen.end());
  return {m.prompt, {m.prompt.begin() + 1, m.prompt.end()}, all};
}

}  // namespace

// The i-quant files add orders that depend on each sequence's token count: the IQ panel (a
// matrix from 8 tokens, an expert from 8 rows routed to it) and IQ4_NL's llamafile order (attn_k_b
// from 2 tokens). (Here the split of an expert's rows by sequence is not bound: a decode row
// summed in the panel order instead of vec_dot's, as without the split, leaves these models'
// logits unchanged; split_rows_by_run's own test binds it. The experts' prompt products in the
// wrong order do change them: test_model_reference.)
TEST_CASE("batched forward of several sequences gives bit-identical logits to each sequence alone (quantized)") {
  const std::pair<std::string, std::string> files[] = {{"deepseek2", "q4_k_m"},  {"qwen3moe", "q4_k_m"},
                                                       {"llama-moe", "q4_k_m"},  {"deepseek2", "iq2_xxs"},
                                                       {"deepseek2", "iq4_xs"}};
  for (const auto& [arch, variant] : files) {
    CAPTURE(arch);
    CAPTURE(variant);
    const std::string name = arch + "-" + variant;
    require_file(tiny_dir(arch) / (name + ".gguf"));
    const Manifest m = load_manifest(arch, variant);
    const core::Model model = core::Model::load((tiny_dir(arch) / (name + ".gguf")).string());
    const auto prompts = prompts_from(m);
    const std::vector<Run> batched = run_batched(model, prompts);
    for (size_t q = 0; q < prompts.size(); ++q) {
      CAPTURE(q);
      const Run alone = run_alone(model, prompts[q]);
      CHECK(batched[q].tokens == alone.tokens);
      REQUIRE(batched[q].logits.size() == alone.logits.size());
      CHECK(std::memcmp(batched[q].logits.data(), alone.logits.data(), alone.logits.size() * 4) == 0);
    }
  }
}

TEST_CASE("batched forward with F16 weights gives bit-identical logits to each sequence alone") {
  const core::Model model = core::Model::load((tiny_dir("qwen3moe") / "qwen3moe-f16.gguf").string());
  const Manifest m = load_manifest("qwen3moe", "f16");
  const auto prompts = prompts_from(m);
  const std::vector<Run> batched = run_batched(model, prompts);
  for (size_t q = 0; q < prompts.size(); ++q) {
    const Run alone = run_alone(model, prompts[q]);
    CHECK(batched[q].tokens == alone.tokens);
    REQUIRE(batched[q].logits.size() == alone.logits.size());
    CHECK(std::memcmp(batched[q].logits.data(), alone.logits.data(), alone.logits.size() * 4) == 0);
  }
}

TEST_CASE("forward_batch rejects a sequence out of range, descending positions and mismatched spans") {
  const core::Model model = core::Model::load((tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string());
  kernels::ThreadPool pool(1);
  core::InCoreExpertSource experts(model);
  core::LlamaSession s(model, experts, pool, {.n_ctx = 32, .n_batch = 8, .n_seq = 2});
  const std::vector<int32_t> toks{1, 2};
  const std::vector<uint8_t> want{1, 1};
  auto expect = [&](std::vector<int32_t> seqs, std::vector<int64_t> pos, const char* text) {
    try {
      s.forward_batch(toks, seqs, pos, want);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find(text) != std::string::npos);
    }
  };
  expect({0, 2}, {0, 0}, "sequence 2 is outside [0, 2)");
  expect({0, 0}, {1, 0}, "must ascend");
  expect({0, 1}, {0, 32}, "does not fit the context");
  expect({0}, {0, 0}, "differ in length");
}

TEST_CASE("split_rows_by_run gives each sequence's rows of an expert one run, skipping sequences without any") {
  std::vector<int64_t> out;
  // Tokens: 0 | 1..28 | 29 (three sequences), 4 slots a token; rows of one expert.
  const std::vector<int64_t> token_runs = {0, 1, 29, 30};
  const std::vector<int32_t> rows = {0 * 4 + 2, 3 * 4 + 1, 5 * 4 + 0, 28 * 4 + 3, 29 * 4 + 1};
  sluice::core::split_rows_by_run(token_runs, rows, 4, out);
  CHECK(out == std::vector<int64_t>{0, 1, 4, 5});
  // The first sequence routes nothing here, the second one row, the third two.
  const std::vector<int64_t> runs2 = {0, 5, 6, 10};
  sluice::core::split_rows_by_run(runs2, std::vector<int32_t>{5 * 2 + 1, 7 * 2 + 0, 9 * 2 + 1}, 2, out);
  CHECK(out == std::vector<int64_t>{0, 1, 3});
  // One sequence: one run.
  sluice::core::split_rows_by_run(std::vector<int64_t>{0, 8}, std::vector<int32_t>{1, 5, 9}, 2, out);
  CHECK(out == std::vector<int64_t>{0, 3});
}
