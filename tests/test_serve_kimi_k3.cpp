// kimi-k3 served: continuous batching over its hybrid session, which holds one recurrent KDA
// state and one MLA cache per sequence (both counted in the budget). Mixed batches give every
// sequence the logits it gets alone, bit for bit; requests batched through the scheduler and
// through `sluice serve` each get the greedy tokens of a single run.
#include <doctest/doctest.h>

#include <httplib.h>

#include <cstring>
#include <future>
#include <nlohmann/json.hpp>

#include "app/serve_scheduler.h"
#include "core/engine.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "core/kimi_k3/kimi_k3_session.h"
#include "core/text/chat_template.h"
#include "core/text/tokenizer.h"
#include "io/pread_reader.h"
#include "tests/model_reference.h"
#include "tests/scheduler_support.h"
#include "tests/serve_process.h"
#include "tests/test_support.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using nlohmann::json;
using Prompt = std::vector<int32_t>;

std::string k3_path() { return (reference_dir() / "kimi-k3" / "kimi-k3-q4_k_m.gguf").string(); }

core::Tokenizer k3_tokenizer() {
  io::PreadReader r(k3_path());
  return core::Tokenizer::from_gguf(core::GgufFile::parse(r));
}

std::vector<Prompt> prompts() {
  const core::Tokenizer t = k3_tokenizer();
  std::vector<Prompt> out;
  for (const char* text : {"Once upon a time there was", "1, 2, 3, 4,", "The quick brown fox jumps", "Hello"})
    out.push_back(t.encode(text, true, true));
  return out;
}


std::vector<float> rows(std::span<const float> s) { return {s.begin(), s.end()}; }

// `sluice run` greedy text for a prompt given as text (special tokens parsed, as the server does).
std::string run_text(const std::string& prompt, int n) {
  std::string ids;
  for (int32_t t : k3_tokenizer().encode(prompt, true, true)) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const CommandResult r = run_sluice("run -m '" + k3_path() + "' --tokens " + ids + " -n " + std::to_string(n) + " --temp 0");
  REQUIRE(r.exit_code == 0);
  REQUIRE(!r.out.empty());
  return as_json_text(r.out.substr(0, r.out.size() - 1));  // run ends with a newline
}

}  // namespace

TEST_CASE("kimi-k3 sequences mixed in one forward_batch get the logits each gets alone, bit for bit") {
  auto model = core::KimiK3Model::load(k3_path());
  core::KimiK3InCoreExperts experts(*model);
  kernels::ThreadPool pool(2);
  const std::vector<Prompt> ps = prompts();
  const int64_t V = model->config().n_vocab;
  // Alone: each prompt as one call (every row), then two single tokens.
  std::vector<std::vector<float>> alone;
  const std::vector<int32_t> next{7, 11};
  for (const Prompt& p : ps) {
    core::KimiK3Session s(*model, experts, pool, {.n_ctx = 64, .n_batch = 64, .kv_type = GgmlType::F16});
    std::vector<float> all = rows(s.forward(p, 0, true));
    for (size_t i = 0; i < next.size(); ++i) {
      const auto r = s.forward({&next[i], 1}, static_cast<int64_t>(p.size() + i));
      all.insert(all.end(), r.begin(), r.end());
    }
    alone.push_back(std::move(all));
  }
  const int64_t S = static_cast<int64_t>(ps.size());
  core::KimiK3Session s(*model, experts, pool, {.n_ctx = 64, .n_batch = 64, .kv_type = GgmlType::F16, .n_seq = S});
  CHECK(s.n_seq() == S);
  CHECK(s.recurrent_state_bytes() == S * core::KimiK3State::recurrent_bytes_for(model->config()));
  // Step 1: every prompt in one batch, every row wanted.
  std::vector<int32_t> tok, seq;
  std::vector<int64_t> pos;
  for (int64_t q = 0; q < S; ++q)
    for (size_t i = 0; i < ps[static_cast<size_t>(q)].size(); ++i) {
      tok.push_back(ps[static_cast<size_t>(q)][i]);
      seq.push_back(static_cast<int32_t>(q));
      pos.push_back(static_cast<int64_t>(i));
    }
  std::vector<uint8_t> want(tok.size(), 1);
  std::vector<float> got = rows(s.forward_batch(tok, seq, pos, want));
  std::vector<std::vector<float>> batched(static_cast<size_t>(S));
  for (size_t t = 0, off = 0; t < tok.size(); ++t, off += static_cast<size_t>(V))
    batched[static_cast<size_t>(seq[t])].insert(batched[static_cast<size_t>(seq[t])].end(), got.begin() + off,
                                                got.begin() + off + V);
  // Steps 2 and 3: one token per sequence, in reverse sequence order.
  for (size_t i = 0; i < next.size(); ++i) {
    tok.clear(), seq.clear(), pos.clear();
    for (int64_t q = S - 1; q >= 0; --q) {
      tok.push_back(next[i]);
      seq.push_back(static_cast<int32_t>(q));
      pos.push_back(static_cast<int64_t>(ps[static_cast<size_t>(q)].size() + i));
    }
    want.assign(tok.size(), 1);
    got = rows(s.forward_batch(tok, seq, pos, want));
    REQUIRE(got.size() == static_cast<size_t>(S * V));
    for (size_t t = 0; t < tok.size(); ++t)
      batched[static_cast<size_t>(seq[t])].insert(batched[static_cast<size_t>(seq[t])].end(), got.begin() + t * V,
                                                  got.begin() + (t + 1) * V);
  }
  for (size_t q = 0; q < ps.size(); ++q) {
    CAPTURE(q);
    REQUIRE(batched[q].size() == alone[q].size());
    CHECK(std::memcmp(batched[q].data(), alone[q].data(), alone[q].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("kimi-k3 requests batched through the scheduler, experts streamed, give each the tokens it gets alone") {
  const std::vector<Prompt> ps = prompts();
  auto make = [&](int64_t n_seq) {
    core::EngineOptions o;
    o.model_path = k3_path();
    o.session.n_ctx = 64;
    o.session.n_batch = 32;
    o.session.n_seq = n_seq;
    o.cache_experts = 0.5;  // streamed through a cache that must evict
    return std::make_unique<core::Engine>(o);
  };
  std::vector<std::vector<int32_t>> alone;
  uint64_t one_state = 0;
  {
    auto e = make(1);
    one_state = e->budget().recurrent_state;
    core::Scheduler s(*e, core::Tokenizer::from_gguf(e->gguf()), {});
    for (const auto& p : ps) alone.push_back(generate(s, p, 6));
  }
  auto e = make(4);
  // Four sequences: four recurrent states (and MLA caches) in the budget.
  CHECK(e->budget().recurrent_state == 4 * one_state);
  CHECK(e->session().n_seq() == 4);
  core::Scheduler s(*e, core::Tokenizer::from_gguf(e->gguf()), {});
  std::vector<std::future<std::vector<int32_t>>> together;
  for (const auto& p : ps) together.push_back(std::async(std::launch::async, [&s, p] { return generate(s, p, 6); }));
  for (size_t i = 0; i < ps.size(); ++i) CHECK(together[i].get() == alone[i]);
  const core::SchedulerMetrics mt = s.metrics();
  CHECK(mt.requests_finished == 4);
  CHECK(mt.generated_tokens == 24);
  CHECK(e->cache()->stats().total.evictions > 0);
}

TEST_CASE("sluice serve runs kimi-k3: four concurrent completions and a chat each get their sluice run text") {
  ServeProcess server({"-m", k3_path(), "--parallel", "4", "-c", "128", "--cache-experts", "50%"});
  const std::vector<std::string> texts{"Once upon a time", "1, 2, 3, 4,", "The quick brown fox", "Hello there"};
  std::vector<std::future<json>> answers;
  for (const auto& p : texts) {
    answers.push_back(std::async(std::launch::async, [&, p] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(120, 0);
      auto res = c.Post("/v1/completions", json{{"prompt", p}, {"max_tokens", 12}, {"temperature", 0}}.dump(),
                        "application/json");
      return res && res->status == 200 ? json::parse(res->body) : json();
    }));
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    CAPTURE(texts[i]);
    const json got = answers[i].get();
    REQUIRE(got.is_object());
    const std::string text = require_text(got["choices"][0]["text"].get<std::string>(), "the completion");  // "" prefixes anything
    const std::string expected = run_text(texts[i], 12);
    if (got["choices"][0]["finish_reason"] == "length") CHECK(text == expected);
    else CHECK(expected.rfind(text, 0) == 0);
  }
  // A chat: the model's own template renders it; the answer is run's text on that rendering.
  io::PreadReader r(k3_path());
  const core::GgufFile file = core::GgufFile::parse(r);
  const core::Tokenizer tok = core::Tokenizer::from_gguf(file);
  const core::ChatTemplate tmpl = core::ChatTemplate::for_model(file, tok, "");
  const json messages = json::array({{{"role", "user"}, {"content", "Say something."}}});
  const std::string expected = run_text(tmpl.apply(nlohmann::ordered_json::parse(messages.dump()), true), 10);
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(120, 0);
  auto res = c.Post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}}.dump(),
                    "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  const json chat = json::parse(res->body);
  const std::string content = require_text(chat["choices"][0]["message"]["content"].get<std::string>(), "the chat answer");
  if (chat["choices"][0]["finish_reason"] == "length") CHECK(content == expected);
  else CHECK(expected.rfind(content, 0) == 0);
  CHECK(c.Get("/metrics")->body.find("sluice_requests_finished_total 5") != std::string::npos);
}
