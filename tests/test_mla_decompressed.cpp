// MLA's decompressed prefill form (core/llama/attention_mla_decompressed.cpp): another order than
// llama.cpp's absorbed one, so it is held to llama.cpp's logits by the absorbed form's own
// distance with the same F16 cache, and `auto` must leave short prompts bit-identical.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tests/model_reference.h"

namespace {

using namespace sluice;
using namespace sluice::test;

core::SessionOptions absorbed_options(int64_t n_ctx, int64_t n_batch) {
  return {.n_ctx = n_ctx, .n_batch = n_batch, .mla_decompress_cells = -1};
}
core::SessionOptions decompressed_options(int64_t n_ctx, int64_t n_batch) {
  return {.n_ctx = n_ctx, .n_batch = n_batch, .mla_decompress_cells = 0, .mla_decompress_tokens = 2};
}

bool memcmp_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Routing records of the reference run whose expert set or group set the run did not choose,
// as (position, the record's smallest margin in router logits).
struct Flip {
  int64_t pos;
  double margin;
};
std::vector<Flip> routing_flips(const Manifest& m, const TeacherForced& run) {
  std::vector<Flip> flips;
  for (const auto& rec : m.json["routing"]) {
    const int64_t pos = rec["pos"].get<int64_t>();
    auto it = run.routing.records.find({pos, rec["layer"].get<int>()});
    REQUIRE(it != run.routing.records.end());
    auto want = rec["experts"].get<std::vector<int32_t>>(), have = it->second.experts;
    auto want_g = rec["groups"].get<std::vector<int32_t>>(), have_g = it->second.groups;
    for (auto* v : {&want, &have, &want_g, &have_g}) std::sort(v->begin(), v->end());
    if (want != have || want_g != have_g)
      flips.push_back({pos, std::min(rec["expert_margin_logit"].get<double>(), rec["group_margin"].get<double>())});
  }
  return flips;
}

// Largest |logit - llama.cpp's| over the prompt rows before `end`.
double max_diff_before(const Manifest& m, const TeacherForced& run, int64_t end) {
  const size_t n = static_cast<size_t>(end * m.n_vocab);
  REQUIRE(run.logits.size() >= n);
  return max_abs_diff(std::vector<float>(run.logits.begin(), run.logits.begin() + static_cast<ptrdiff_t>(n)),
                      std::vector<float>(m.logits.begin(), m.logits.begin() + static_cast<ptrdiff_t>(n)));
}

}  // namespace

// An F16 cache's logits are compared with llama.cpp's F32-cache run, by both forms. Bounds: every
// routing record either form chose differently from llama.cpp has a margin under 0.01 router
// logits (a different rounding may flip those; README of the reference data); over the prompt
// rows before the first such record, the decompressed form's largest |logit diff| is at most
// 1.5x the absorbed form's plus 0.02; the greedy continuation is llama.cpp's wherever llama.cpp's
// margin is above twice the absorbed form's largest difference.
TEST_CASE("MLA's decompressed prefill stays as close to llama.cpp's logits as the absorbed form on every deepseek2 "
          "reference model") {
  for (const char* variant : {"f16", "q8_0", "q4_k_m", "q2_k", "iq1_s", "iq2_xxs", "iq3_xxs", "iq4_xs", "tq1_0"}) {
    CAPTURE(variant);
    const auto path = tiny_dir("deepseek2") / (std::string("deepseek2-") + variant + ".gguf");
    const core::Model model = core::Model::load(path.string());
    const Manifest m = load_manifest("deepseek2", variant);
    const TeacherForced absorbed = teacher_force(model, m.prompt, m.gen, GgmlType::F16, 1, absorbed_options(128, 64));
    const TeacherForced decompressed =
        teacher_force(model, m.prompt, m.gen, GgmlType::F16, 1, decompressed_options(128, 64));
    // The form ran: the prompt's rows are not the absorbed form's bits.
    CHECK_FALSE(memcmp_equal(absorbed.logits.data(), decompressed.logits.data(), absorbed.logits.size()));
    auto end = static_cast<int64_t>(m.prompt.size());
    std::string flips_text;
    for (const TeacherForced* run : {&absorbed, &decompressed})
      for (const Flip& f : routing_flips(m, *run)) {
        CHECK(f.margin < 0.01);
        end = std::min(end, f.pos);
        flips_text += " pos " + std::to_string(f.pos) + " (margin " + std::to_string(f.margin) + ")";
      }
    const double a = max_diff_before(m, absorbed, end), d = max_diff_before(m, decompressed, end);
    MESSAGE("deepseek2-" << std::string(variant) << ": max |logit diff| to llama.cpp over " << end
                         << " prompt rows: absorbed " << a << ", decompressed " << d << "; routing flips:" << flips_text);
    CHECK(d <= 1.5 * a + 0.02);
    // Greedy: llama.cpp's token wherever its top1-top2 margin is above 2x the absorbed form's largest
    // |logit diff| (below that, two logits each off by that much may trade places in either form).
    for (size_t g = 0; g < m.gen.size(); ++g) {
      const float* row = decompressed.logits.data() + (m.prompt.size() - 1 + g) * static_cast<size_t>(m.n_vocab);
      const int64_t top = argmax(row, m.n_vocab);
      if (top == m.gen[g]) continue;
      const double margin = m.json["steps"][g]["margin_top1_top2"].get<double>();
      MESSAGE("greedy step " << g << ": " << top << " instead of " << m.gen[g] << " (llama.cpp's margin " << margin
                             << ", ours " << row[top] - row[m.gen[g]] << " the other way)");
      CHECK(margin < 2 * a);
    }
  }
}

TEST_CASE("MLA's automatic form leaves batches under 1,024 cells bit-identical to the absorbed form and decompresses "
          "from there") {
  const core::Model model = core::Model::load((tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf").string());
  const int64_t V = model.config().n_vocab;
  const auto prompt = long_prompt(V, 1100, 0x2545f4914f6cdd1dull);
  auto prefill = [&](core::SessionOptions o) {
    kernels::ThreadPool pool(2);
    core::InCoreExpertSource experts(model);
    core::LlamaSession s(model, experts, pool, o);
    std::vector<float> out;
    for (size_t i = 0; i < prompt.size(); i += 256) {
      const size_t n = std::min<size_t>(256, prompt.size() - i);
      auto rows = s.forward({prompt.data() + i, n}, static_cast<int64_t>(i));
      out.insert(out.end(), rows.begin(), rows.end());
    }
    return out;
  };
  const auto absorbed = prefill(absorbed_options(1280, 256));
  const auto automatic = prefill({.n_ctx = 1280, .n_batch = 256});  // the defaults: 1,024 cells, 256 tokens
  REQUIRE(absorbed.size() == automatic.size());
  // Batches of 256: the first three end at or before cell 768; the fourth reaches 1,024 cells.
  CHECK(memcmp_equal(absorbed.data(), automatic.data(), static_cast<size_t>(768 * V)));
  CHECK_FALSE(memcmp_equal(absorbed.data() + 768 * V, automatic.data() + 768 * V, static_cast<size_t>(256 * V)));
}

TEST_CASE("a batch mixing a decompressed MLA prompt with an absorbed sequence gives each its single-sequence logits") {
  const core::Model model = core::Model::load((tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf").string());
  const int64_t V = model.config().n_vocab;
  const auto prompt = long_prompt(V, 40, 0x2545f4914f6cdd1dull);
  const int32_t other = prompt[7];
  auto options = decompressed_options(128, 64);
  kernels::ThreadPool pool(2);
  core::InCoreExpertSource experts(model);
  // Alone: sequence 0's 40-token prompt (decompressed), and sequence 1's one token (absorbed: a
  // single token never takes the decompressed form).
  std::vector<float> alone0, alone1;
  {
    core::LlamaSession s(model, experts, pool, options);
    auto rows = s.forward(prompt, 0);
    alone0.assign(rows.begin(), rows.end());
  }
  {
    core::LlamaSession s(model, experts, pool, options);
    auto rows = s.forward({&other, 1}, 0);
    alone1.assign(rows.begin(), rows.end());
  }
  options.n_seq = 2;
  core::LlamaSession s(model, experts, pool, options);
  std::vector<int32_t> tokens(prompt);
  std::vector<int32_t> seqs(prompt.size(), 0);
  std::vector<int64_t> positions(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) positions[i] = static_cast<int64_t>(i);
  tokens.insert(tokens.begin() + 20, other);  // in the middle of sequence 0's tokens
  seqs.insert(seqs.begin() + 20, 1);
  positions.insert(positions.begin() + 20, 0);
  const std::vector<uint8_t> want(tokens.size(), 1);
  auto rows = s.forward_batch(tokens, seqs, positions, want);
  REQUIRE(rows.size() == tokens.size() * static_cast<size_t>(V));
  for (size_t t = 0; t < tokens.size(); ++t) {
    CAPTURE(t);
    const float* expect = seqs[t] == 1 ? alone1.data() : alone0.data() + (t < 20 ? t : t - 1) * static_cast<size_t>(V);
    CHECK(memcmp_equal(rows.data() + t * static_cast<size_t>(V), expect, static_cast<size_t>(V)));
  }
}
