// The generate loop (app/generate.h): the stop conditions of SequenceGenerator on logits rows
// chosen by the test (one-hot, so greedy sampling picks the token the test wants), and generate()
// over an Engine on a reference model: a prompt fed in chunks of n_batch gives the rows of a
// hand-made chunked run bit for bit and the greedy tokens of a one-chunk run.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "app/generate.h"
#include "core/engine.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"
#include "io/pread_reader.h"
#include "tests/float_compare.h"
#include "tests/test_support.h"

using namespace sluice;

namespace {

std::string model() { return (test::reference_dir() / "tiny/qwen3moe/qwen3moe-q4_k_m.gguf").string(); }

const core::Tokenizer& tokenizer() {
  static const core::Tokenizer tok = [] {
    io::PreadReader reader(model());
    return core::Tokenizer::from_gguf(core::GgufFile::parse(reader));
  }();
  return tok;
}

constexpr core::SamplerOptions kGreedy{.temperature = 0, .repeat_penalty = 1};

// Drives a sequence the way generate() does, with a one-hot row for each token in `script` (the
// i-th sampled token is script[i]); returns the tokens sampled and counts the tokens fed.
struct Driven {
  std::vector<int32_t> sampled;
  int64_t decode_fed = 0;
};

Driven drive(core::SequenceGenerator& seq, std::span<const int32_t> script, int64_t n_vocab) {
  std::vector<float> row(static_cast<size_t>(n_vocab));
  auto one_hot = [&](size_t i) {
    std::fill(row.begin(), row.end(), 0.0f);
    row[static_cast<size_t>(script[std::min(i, script.size() - 1)])] = 1.0f;
    return std::span<const float>(row);
  };
  Driven d;
  while (seq.prefilling()) {
    const core::SequenceInput in = seq.next_input(3);
    seq.fed(in.tokens.size());
    if (in.wants_logits) break;
  }
  core::SampledToken t = seq.accept_logits(one_hot(0));
  while (t.token >= 0) {
    d.sampled.push_back(t.token);
    if (seq.done()) break;
    const core::SequenceInput in = seq.next_input(1);
    REQUIRE(in.tokens.size() == 1);
    CHECK(in.tokens[0] == t.token);
    seq.fed(1);
    ++d.decode_fed;
    if (!in.wants_logits) break;
    t = seq.accept_logits(one_hot(d.sampled.size()));
  }
  return d;
}

const std::vector<int32_t> kPrompt{1, 2, 3, 4, 5, 6, 7};

}  // namespace

TEST_CASE("generate: a sequence ends at the end token, counted and, as chat asks, fed") {
  const core::Tokenizer& tok = tokenizer();
  const int64_t n_vocab = tok.n_vocab();
  REQUIRE(tok.eos() >= 0);
  const std::vector<int32_t> script{10, 11, tok.eos(), 12};
  core::SequenceGenerator seq(n_vocab, 64);

  core::GenerateOptions run{.max_tokens = 10, .end_tokens = core::EndTokens::eos, .tokenizer = &tok};
  seq.start(kPrompt, 0, run, kGreedy);
  Driven d = drive(seq, script, n_vocab);
  CHECK(d.sampled == std::vector<int32_t>{10, 11, tok.eos()});
  CHECK(d.decode_fed == 2);  // run: the end token is printed and counted, never fed
  CHECK(seq.reason() == core::StopReason::end_token);
  CHECK(seq.generated() == 3);

  core::GenerateOptions chat = run;
  chat.end_tokens = core::EndTokens::eog;
  chat.feed_end_token = true;
  seq.start(kPrompt, 4, chat, kGreedy);
  d = drive(seq, script, n_vocab);
  CHECK(d.sampled.size() == 3);
  CHECK(d.decode_fed == 3);  // chat: the end of the turn goes into the cache
  CHECK(seq.pos() == static_cast<int64_t>(kPrompt.size()) + 3);
  CHECK(seq.reason() == core::StopReason::end_token);

  core::GenerateOptions ignore = run;
  ignore.end_tokens = core::EndTokens::none;  // --ignore-eos
  seq.start(kPrompt, 0, ignore, kGreedy);
  d = drive(seq, script, n_vocab);
  CHECK(d.sampled.size() == 10);
  CHECK(seq.reason() == core::StopReason::max_tokens);
}

TEST_CASE("generate: a stop string split across two tokens ends the sequence and cuts the text before it") {
  const core::Tokenizer& tok = tokenizer();
  const int64_t n_vocab = tok.n_vocab();
  // Two tokens whose pieces are plain text of two or more bytes; the stop string is the last byte
  // of the first and the first byte of the second.
  std::vector<int32_t> words;
  for (int32_t id = 100; id < n_vocab && words.size() < 3; ++id) {
    const std::string p = tok.token_to_piece(id, false);
    if (p.size() >= 2 && std::all_of(p.begin(), p.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); }))
      words.push_back(id);
  }
  REQUIRE(words.size() == 3);
  const std::string a = tok.token_to_piece(words[0], false), b = tok.token_to_piece(words[1], false);
  const std::string stop = a.substr(a.size() - 1) + b.substr(0, 1);
  INFO("pieces '" << a << "' '" << b << "', stop '" << stop << "'");
  REQUIRE((tok.token_to_piece(words[2], false) + a).find(stop) == std::string::npos);
  core::SequenceGenerator seq(n_vocab, 64);
  core::GenerateOptions o{.max_tokens = 10, .tokenizer = &tok, .stop_strings = {stop}};
  seq.start(kPrompt, 0, o, kGreedy);
  const std::vector<int32_t> script{words[2], words[0], words[1], words[2]};
  const Driven d = drive(seq, script, n_vocab);
  CHECK(d.sampled == std::vector<int32_t>{words[2], words[0], words[1]});
  CHECK(d.decode_fed == 2);  // the token that completed the stop string is not fed
  CHECK(seq.reason() == core::StopReason::stop_string);
  CHECK(seq.text() == tok.token_to_piece(words[2], false) + a.substr(0, a.size() - 1));
}

TEST_CASE("generate: n_predict tokens are sampled, the last one fed as run and bench ask and not fed as serve asks") {
  const int64_t n_vocab = tokenizer().n_vocab();
  const std::vector<int32_t> script{20, 21, 22, 23, 24, 25, 26};
  core::SequenceGenerator seq(n_vocab, 64);
  for (int64_t n : {0, 1, 4}) {
    CAPTURE(n);
    seq.start(kPrompt, 0, {.max_tokens = n}, kGreedy);
    Driven d = drive(seq, script, n_vocab);
    CHECK(static_cast<int64_t>(d.sampled.size()) == n);
    CHECK(d.decode_fed == n);  // run: --logits-out has n_prompt + n rows
    CHECK(seq.reason() == core::StopReason::max_tokens);
    CHECK(seq.done());

    seq.start(kPrompt, 0, {.max_tokens = n, .feed_last_token = false}, kGreedy);
    d = drive(seq, script, n_vocab);
    CHECK(static_cast<int64_t>(d.sampled.size()) == n);
    CHECK(d.decode_fed == std::max<int64_t>(n - 1, 0));
    CHECK(seq.reason() == core::StopReason::max_tokens);
  }
}

TEST_CASE("generate: a full context ends the sequence after sampling the token without a position, or before sampling for chat") {
  const int64_t n_vocab = tokenizer().n_vocab();
  const std::vector<int32_t> script{30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40};
  const int64_t n_ctx = 10;  // the prompt has 7 tokens: positions 7, 8, 9 are left
  core::SequenceGenerator seq(n_vocab, n_ctx);
  seq.start(kPrompt, 0, {}, kGreedy);
  Driven d = drive(seq, script, n_vocab);
  CHECK(d.sampled.size() == 4);  // run and serve: the 4th token is sampled and shown, never fed
  CHECK(d.decode_fed == 3);
  CHECK(seq.reason() == core::StopReason::context_full);
  CHECK(seq.pos() == n_ctx);

  seq.start(kPrompt, 0, {.room_before_sampling = true}, kGreedy);
  d = drive(seq, script, n_vocab);
  CHECK(d.sampled.size() == 3);  // chat: every sampled token is fed
  CHECK(d.decode_fed == 3);
  CHECK(seq.reason() == core::StopReason::context_full);

  std::atomic<bool> interrupt{true};
  seq.start(kPrompt, 0, {.interrupt = &interrupt}, kGreedy);
  d = drive(seq, script, n_vocab);
  CHECK(d.sampled.empty());
  CHECK(seq.reason() == core::StopReason::interrupted);

  CHECK_THROWS_WITH_AS(seq.start(std::vector<int32_t>(11, 1), 0, {}, kGreedy),
                       doctest::Contains("longer than the context of 10"), Error);
  CHECK_THROWS_WITH_AS(seq.start(kPrompt, 7, {}, kGreedy), doctest::Contains("none left to evaluate"), Error);
}

namespace {

// Every row generate() hands out, in order.
struct Rows final : core::GenerateObserver {
  bool wants_prompt_logits() const override { return true; }
  void on_rows(std::span<const float> r) override { rows.insert(rows.end(), r.begin(), r.end()); }
  void on_token(int64_t, int32_t token, bool) override { tokens.push_back(token); }
  std::vector<float> rows;
  std::vector<int32_t> tokens;
};

core::EngineOptions engine_options(int64_t n_batch) {
  core::EngineOptions o;
  o.model_path = model();
  o.in_core = true;
  o.session.n_ctx = 64;
  o.session.n_batch = n_batch;
  o.session.kv_type = GgmlType::F32;
  return o;
}

}  // namespace

TEST_CASE("generate: a prompt longer than n_batch is fed in chunks, equal to a chunked run and to one chunk") {
  const std::vector<int32_t> prompt = tokenizer().encode("The quick brown fox jumps over the lazy dog. Once upon a time", true, false);
  REQUIRE(prompt.size() > 9);
  const int64_t n_gen = 6;
  core::Engine chunked(engine_options(4));
  const int64_t n_vocab = chunked.n_vocab();
  core::SequenceGenerator seq(n_vocab, chunked.n_ctx());
  seq.start(prompt, 0, {.max_tokens = n_gen}, kGreedy);
  Rows got;
  const core::GenerateStats st = core::generate(chunked, seq, &got);
  CHECK(st.prompt_tokens == static_cast<int64_t>(prompt.size()));
  CHECK(st.prefilled_tokens == static_cast<int64_t>(prompt.size()));
  CHECK(st.generated == n_gen);
  CHECK(st.decoded == n_gen);
  REQUIRE(got.tokens.size() == static_cast<size_t>(n_gen));
  REQUIRE(got.rows.size() == (prompt.size() + static_cast<size_t>(n_gen)) * static_cast<size_t>(n_vocab));

  // By hand on a fresh engine of the same batch: the same rows, bit for bit.
  core::Engine by_hand(engine_options(4));
  std::vector<float> want;
  for (size_t i = 0; i < prompt.size(); i += 4) {
    const auto r = by_hand.forward({prompt.data() + i, std::min<size_t>(4, prompt.size() - i)}, static_cast<int64_t>(i));
    want.insert(want.end(), r.begin(), r.end());
  }
  for (int64_t k = 0; k < n_gen; ++k) {
    const auto r = by_hand.forward({&got.tokens[static_cast<size_t>(k)], 1}, static_cast<int64_t>(prompt.size()) + k);
    want.insert(want.end(), r.begin(), r.end());
  }
  CHECK(want == got.rows);

  // One chunk (n_batch >= the prompt): the same greedy tokens, logits within rounding.
  core::Engine whole(engine_options(64));
  seq.start(prompt, 0, {.max_tokens = n_gen}, kGreedy);
  Rows one;
  core::generate(whole, seq, &one);
  CHECK(one.tokens == got.tokens);
  REQUIRE(one.rows.size() == got.rows.size());
  CHECK(test::max_abs_diff(one.rows, got.rows) < 1e-2);
}
