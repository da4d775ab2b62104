// SessionOptions::n_logit_rows: a session that keeps fewer logits rows than its batch spends that
// much less scratch (so --budget gives it to the expert cache), returns the same last-row logits
// bit for bit, and refuses a call that would need more rows instead of writing past them.
#include <doctest/doctest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/engine.h"
#include "tests/reference_files.h"
#include "tests/test_support.h"

using sluice::core::Engine;
using sluice::core::EngineOptions;

namespace {

EngineOptions options_for(const sluice::test::ReferenceModel& m, int64_t n_logit_rows, int64_t n_seq = 1) {
  EngineOptions o;
  o.model_path = m.gguf().string();
  o.session.n_ctx = 64;
  o.session.n_batch = 32;
  o.session.n_seq = n_seq;
  o.session.n_logit_rows = n_logit_rows;
  o.session.kv_type = sluice::GgmlType::F32;
  o.threads = 2;
  return o;
}

std::vector<int32_t> prompt_of(const sluice::test::ReferenceModel& m) {
  auto j = nlohmann::json::parse(sluice::test::read_text(m.manifest()));
  return j["prompt_tokens"].get<std::vector<int32_t>>();
}

void require_refused(const std::function<void()>& call) {
  try {
    call();
    FAIL("a call needing more logits rows than the session keeps was accepted");
  } catch (const sluice::Error& e) {
    CHECK(e.code() == sluice::ErrorCode::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find("logits rows") != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("a session keeping one logits row uses (batch - 1) rows less scratch, gives the same last row, and refuses more rows") {
  for (const auto& m : sluice::test::supported_reference_models()) {
    INFO(m.stem);
    const std::vector<int32_t> prompt = prompt_of(m);
    REQUIRE(prompt.size() >= 2);
    Engine all(options_for(m, 0)), one(options_for(m, 1));
    const uint64_t row = static_cast<uint64_t>(all.n_vocab()) * sizeof(float);
    CHECK(all.budget().scratch - one.budget().scratch == static_cast<uint64_t>(all.n_batch() - 1) * row);

    const std::span<const float> want = all.forward(prompt, 0, false);
    const std::span<const float> got = one.forward(prompt, 0, false);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size_bytes()) == 0);

    // Every prompt row from the session that keeps one: refused, naming the rows.
    Engine fresh(options_for(m, 1));
    require_refused([&] { fresh.forward(prompt, 0, true); });
  }
}

TEST_CASE("forward_batch with more wanted rows than the session keeps is refused, and as many as it keeps are the single runs' rows") {
  for (const auto& m : sluice::test::supported_reference_models()) {
    INFO(m.stem);
    const std::vector<int32_t> prompt = prompt_of(m);
    const size_t n = std::min<size_t>(prompt.size(), 4);
    // Two sequences of n tokens each, one logits row for each last token: what serve asks for.
    std::vector<int32_t> tokens, seqs;
    std::vector<int64_t> positions;
    std::vector<uint8_t> want;
    for (int32_t s = 0; s < 2; ++s)
      for (size_t t = 0; t < n; ++t) {
        tokens.push_back(prompt[t]);
        seqs.push_back(s);
        positions.push_back(static_cast<int64_t>(t));
        want.push_back(t + 1 == n);
      }
    Engine two(options_for(m, 2, 2));
    const std::span<const float> rows = two.forward_batch(tokens, seqs, positions, want);
    Engine single(options_for(m, 1));
    const std::span<const float> alone = single.forward({prompt.data(), n}, 0, false);
    REQUIRE(rows.size() == 2 * alone.size());
    CHECK(std::memcmp(rows.data(), alone.data(), alone.size_bytes()) == 0);
    CHECK(std::memcmp(rows.data() + alone.size(), alone.data(), alone.size_bytes()) == 0);

    Engine one(options_for(m, 1, 2));
    require_refused([&] { one.forward_batch(tokens, seqs, positions, want); });
  }
}
