// sluice serve over real HTTP: a server on a free localhost port, driven with cpp-httplib's
// client (and a raw socket for disconnects). Greedy answers must equal `sluice run` on the same
// rendered prompt, alone and with several requests batched together; bad requests get JSON
// errors and leave the server healthy.
#include <doctest/doctest.h>

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <future>
#include <nlohmann/json.hpp>

#include "core/text/chat_template.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"
#include "io/pread_reader.h"
#include "tests/model_reference.h"
#include "tests/serve_process.h"
#include "tests/sse_events.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using nlohmann::json;

std::string model_path() { return (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string(); }

core::Tokenizer tokenizer() {
  io::PreadReader r(model_path());
  return core::Tokenizer::from_gguf(core::GgufFile::parse(r));
}

// `sluice run` greedy text for a prompt given as text (tokenized with special tokens parsed,
// as the server does).
std::string run_text(const std::string& prompt, int n) {
  std::string ids;
  for (int32_t t : tokenizer().encode(prompt, true, true)) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const CommandResult r = run_sluice("run -m '" + model_path() + "' --tokens " + ids + " -n " + std::to_string(n) + " --temp 0");
  REQUIRE(r.exit_code == 0);
  REQUIRE(!r.out.empty());
  return as_json_text(r.out.substr(0, r.out.size() - 1));  // run ends with a newline
}

std::string chatml(const json& messages) {
  const core::ChatTemplate t(core::builtin_chat_template("chatml"), "", "", false, false);
  return t.apply(nlohmann::ordered_json::parse(messages.dump()), true);
}

json post(httplib::Client& c, const std::string& path, const json& body, int expect_status = 200) {
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(res);
  CHECK_MESSAGE(res->status == expect_status, res->body);
  return json::parse(res->body);
}

// The concatenated delta texts of an SSE stream, and its finish_reason.
std::pair<std::string, std::string> read_stream(const std::string& raw, bool chat) {
  std::string text, finish;
  for (const json& e : sse_events(raw)) {
    const json& ch = e["choices"][0];
    if (chat && ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (!chat) text += ch["text"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  return {text, finish};
}

}  // namespace

TEST_CASE("sluice serve answers health, models, metrics, completions and chat like sluice run") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "2", "-c", "256"});
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(120, 0);

  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(json::parse(health->body)["status"] == "ok");
  const json models = json::parse(c.Get("/v1/models")->body);
  CHECK(models["data"][0]["id"] == "qwen3moe-q4_k_m");

  const json comp = post(c, "/v1/completions", {{"model", "qwen3moe-q4_k_m"}, {"prompt", "The capital of France"},
                                                {"max_tokens", 8}, {"temperature", 0}});
  CHECK(comp["object"] == "text_completion");
  CHECK(comp["choices"][0]["finish_reason"] == "length");
  CHECK(comp["usage"]["completion_tokens"] == 8);
  CHECK(comp["choices"][0]["text"].get<std::string>() == run_text("The capital of France", 8));

  // A stop string ends the text just before it (an ASCII pair from sluice run's own text).
  const std::string longer = run_text("The capital of France", 16);
  size_t at = 1;
  while (at + 1 < longer.size() && !(std::isalnum(static_cast<unsigned char>(longer[at])) &&
                                     std::isalnum(static_cast<unsigned char>(longer[at + 1]))))
    ++at;
  if (at + 1 < longer.size() && std::all_of(longer.begin(), longer.begin() + static_cast<long>(at), [](char ch) {
        return static_cast<unsigned char>(ch) < 0x80;
      })) {
    const std::string stop = longer.substr(at, 2);
    const json cut = post(c, "/v1/completions", {{"prompt", "The capital of France"}, {"max_tokens", 16},
                                                 {"temperature", 0}, {"stop", stop}});
    CHECK(cut["choices"][0]["finish_reason"] == "stop");
    CHECK(cut["choices"][0]["text"].get<std::string>() == longer.substr(0, longer.find(stop)));
  } else {
    MESSAGE("no ASCII pair in the greedy text; stop strings not checked");
  }

  const json messages = json::array({{{"role", "system"}, {"content", "You are terse."}},
                                     {{"role", "user"}, {"content", "Name a colour."}}});
  const std::string expected = run_text(chatml(messages), 10);
  const json chat = post(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}});
  CHECK(chat["object"] == "chat.completion");
  CHECK(chat["choices"][0]["message"]["role"] == "assistant");
  const std::string content = chat["choices"][0]["message"]["content"];
  REQUIRE(!expected.empty());
  CHECK(!content.empty());  // the empty string is a prefix of anything
  if (chat["choices"][0]["finish_reason"] == "length") CHECK(content == expected);
  else CHECK(expected.rfind(content, 0) == 0);

  const std::string raw = raw_post(server.port(), "/v1/chat/completions",
                                   json{{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}, {"stream", true}}.dump());
  CHECK(raw.find("text/event-stream") != std::string::npos);
  const auto [streamed, finish] = read_stream(raw, true);
  CHECK(streamed == content);
  CHECK(finish == chat["choices"][0]["finish_reason"]);

  const std::string metrics = c.Get("/metrics")->body;
  CHECK(metrics.find("sluice_generated_tokens_total") != std::string::npos);
  CHECK(metrics.find("sluice_queue_depth 0") != std::string::npos);
  CHECK(metrics.find("sluice_cache_hit_rate") != std::string::npos);
  CHECK(server.stop() == 0);
}

TEST_CASE("concurrent requests decode together and each gets its own sluice run text") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "3", "-c", "128"});
  const std::vector<std::string> prompts{"Once upon a time", "1, 2, 3, 4,", "The quick brown fox"};
  std::vector<std::future<json>> answers;
  for (const auto& p : prompts) {
    answers.push_back(std::async(std::launch::async, [&, p] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(120, 0);
      auto res = c.Post("/v1/completions", json{{"prompt", p}, {"max_tokens", 12}, {"temperature", 0}}.dump(), "application/json");
      return res && res->status == 200 ? json::parse(res->body) : json();
    }));
  }
  std::vector<json> got;
  for (auto& a : answers) got.push_back(a.get());
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(prompts[i]);
    REQUIRE(got[i].is_object());
    const std::string text = got[i]["choices"][0]["text"];
    const std::string expected = run_text(prompts[i], 12);
    REQUIRE(!expected.empty());
    CHECK(!text.empty());  // the empty string is a prefix of anything
    if (got[i]["choices"][0]["finish_reason"] == "length") CHECK(text == expected);
    else CHECK(expected.rfind(text, 0) == 0);
  }
  httplib::Client c("127.0.0.1", server.port());
  const std::string metrics = c.Get("/metrics")->body;
  CHECK(metrics.find("sluice_requests_finished_total 3") != std::string::npos);
}

TEST_CASE("bad requests get JSON errors and leave the server healthy") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "--queue", "0",
                       "--max-body", "4K", "-c", "512"});
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60, 0);
  auto error_of = [&](const std::string& path, const std::string& body, int status) {
    auto res = c.Post(path.c_str(), body, "application/json");
    REQUIRE(res);
    CHECK_MESSAGE(res->status == status, res->body);
    const json j = json::parse(res->body, nullptr, false);
    REQUIRE(j.is_object());
    CHECK(j["error"]["message"].is_string());
    return j["error"]["message"].get<std::string>();
  };
  CHECK(error_of("/v1/chat/completions", "{\"messages\": [", 400).find("not valid JSON") != std::string::npos);
  CHECK(error_of("/v1/chat/completions", "[1, 2]", 400).find("JSON object") != std::string::npos);
  CHECK(error_of("/v1/chat/completions", "{}", 400).find("'messages'") != std::string::npos);
  CHECK(error_of("/v1/completions", R"({"prompt": "x", "max_tokens": -3})", 400).find("max_tokens") != std::string::npos);
  CHECK(error_of("/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400).find("temperature") != std::string::npos);
  CHECK(error_of("/v1/completions", R"({"prompt": [99999999]})", 400).find("outside the vocabulary") != std::string::npos);
  CHECK(error_of("/v1/chat/completions", R"({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})", 404)
            .find("'gpt-4' is not served") != std::string::npos);
  CHECK(error_of("/v1/completions", json{{"prompt", std::string(8192, 'a')}}.dump(), 413).find("--max-body") != std::string::npos);
  auto none = c.Get("/v1/nothing");
  REQUIRE(none);
  CHECK(none->status == 404);

  // A client that leaves mid-stream: the server cancels its request and frees the slot.
  int chunks = 0;
  raw_post(server.port(), "/v1/completions", json{{"prompt", "Count:"}, {"max_tokens", 400}, {"stream", true}}.dump(),
           [&](const std::string& all) {
             chunks = static_cast<int>(std::count(all.begin(), all.end(), '\n'));
             return all.find("\"text\":\"") == std::string::npos || chunks < 12;  // a few tokens, then hang up
           });
  bool cancelled = false;
  for (int i = 0; i < 200 && !cancelled; ++i) {
    cancelled = c.Get("/metrics")->body.find("sluice_requests_cancelled_total 1") != std::string::npos;
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(cancelled);

  // With the only slot busy and no queue, another request is refused with 503.
  std::promise<void> streaming;
  auto busy = std::async(std::launch::async, [&] {
    bool told = false;
    raw_post(server.port(), "/v1/completions", json{{"prompt", "Busy:"}, {"max_tokens", 300}, {"stream", true}}.dump(),
             [&](const std::string& all) {
               if (!told && all.find("data: ") != std::string::npos) {
                 told = true;
                 streaming.set_value();
               }
               return all.size() < 2000;  // then leave, as the first client did
             });
    if (!told) streaming.set_value();
  });
  streaming.get_future().wait();
  CHECK(error_of("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", 503).find("queue is full") != std::string::npos);
  busy.get();
  bool freed = false;  // the busy client left too: its slot frees at the server's next write
  for (int i = 0; i < 200 && !freed; ++i) {
    freed = c.Get("/metrics")->body.find("sluice_requests_active 0") != std::string::npos;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(freed);

  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  const json ok = post(c, "/v1/completions", {{"prompt", "Still there?"}, {"max_tokens", 3}, {"temperature", 0}});
  CHECK(ok["usage"]["completion_tokens"].get<int>() >= 1);
  CHECK(server.alive());
}

TEST_CASE("sluice serve falls back to chatml for a model without a chat template and answers both endpoints") {
  ServeProcess server({"-m", model_path(), "-c", "128"});
  CHECK(server.stderr_text().find("no tokenizer.chat_template; using chatml") != std::string::npos);
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60, 0);
  const json chat = post(c, "/v1/chat/completions",
                         {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 3}, {"temperature", 0}});
  CHECK(chat["usage"]["completion_tokens"].get<int>() >= 1);
  const json text = post(c, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 3}, {"temperature", 0}});
  CHECK(text["usage"]["completion_tokens"].get<int>() >= 1);
  const CommandResult bad = run_sluice("serve -m '" + model_path() + "' --port 0 --chat-template '{% call x() %}{% endcall %}'");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("outside the Jinja subset") != std::string::npos);
}
