// Tool calls through a running sluice serve: with each family's real chat template, a reply in
// that family's syntax (forced with the testing flag --test-reply, since a tiny random model never
// writes one) comes back as OpenAI `tool_calls` with parsed arguments and finish_reason
// "tool_calls", streamed (delta chunks) and not; a malformed call comes back as text with "stop";
// the client's next turn (role "tool" with tool_call_id) renders through the same template.
#include <doctest/doctest.h>

#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/model_reference.h"
#include "tests/serve_process.h"
#include "tests/sse_events.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using nlohmann::json;

std::string model_path() { return (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string(); }

const json kTools = json::array(
    {{{"type", "function"},
      {"function", {{"name", "get_weather"}, {"description", "Weather in a city"},
                    {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});

std::string write_reply(const std::string& text) {
  const auto path = temp_dir("reply") / "reply.txt";
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

struct Family {
  std::string template_name;  // "" : chatml (the generic JSON fallback)
  std::string reply;
  std::string content;  // expected content before the calls ("" -> null)
};

std::vector<Family> families() {
  return {
      {"Kimi-K2-Instruct",
       "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
       "{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
       "Checking."},
      {"Kimi-K3",
       "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" "
       "type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
       ""},
      {"deepseek-ai-DeepSeek-V3.1",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>",
       ""},
      {"Qwen-Qwen3-0.6B",
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "Let me check.\n"},
      {"", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", ""},
  };
}

std::vector<std::string> server_args(const Family& f, const std::string& reply_file) {
  const std::string tmpl = f.template_name.empty() ? std::string("chatml")
                                                   : (reference_dir() / "templates" / (f.template_name + ".jinja")).string();
  return {"-m", model_path(), "--chat-template", tmpl, "--parallel", "1", "-c", "1024", "--test-reply", reply_file};
}

// The tool_calls and content of a stream's delta chunks, and its finish_reason.
struct Streamed {
  std::string content;
  json calls = json::array();
  std::string finish;
};

Streamed read_stream(const std::string& raw) {
  Streamed s;
  for (const json& e : sse_events(raw)) {
    const json& ch = e["choices"][0];
    if (ch["delta"].contains("content")) s.content += ch["delta"]["content"].get<std::string>();
    if (ch["delta"].contains("tool_calls"))
      for (const auto& c : ch["delta"]["tool_calls"]) s.calls.push_back(c);
    if (!ch["finish_reason"].is_null()) s.finish = ch["finish_reason"];
  }
  return s;
}

}  // namespace

TEST_CASE("a forced reply in each family's syntax comes back as tool_calls, streamed and not") {
  const json messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  for (const Family& f : families()) {
    CAPTURE(f.template_name);
    ServeProcess server(server_args(f, write_reply(f.reply)));
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    json req = {{"messages", messages}, {"tools", kTools}, {"max_tokens", 400}, {"temperature", 0}};
    auto res = c.Post("/v1/chat/completions", req.dump(), "application/json");
    REQUIRE(res);
    REQUIRE_MESSAGE(res->status == 200, res->body);
    const json choice = json::parse(res->body)["choices"][0];
    CHECK(choice["finish_reason"] == "tool_calls");
    const json& msg = choice["message"];
    if (f.content.empty()) CHECK(msg["content"].is_null());
    else CHECK(msg["content"] == f.content);
    REQUIRE(msg["tool_calls"].size() == 1);
    const json call = msg["tool_calls"][0];
    CHECK(call["type"] == "function");
    CHECK(!call["id"].get<std::string>().empty());
    CHECK(call["function"]["name"] == "get_weather");
    CHECK(json::parse(call["function"]["arguments"].get<std::string>()) == json{{"city", "Paris"}});

    req["stream"] = true;
    const Streamed st = read_stream(raw_post(server.port(), "/v1/chat/completions", req.dump()));
    CHECK(st.finish == "tool_calls");
    CHECK(st.content == f.content);
    REQUIRE(st.calls.size() == 1);
    CHECK(st.calls[0]["index"] == 0);
    CHECK(!st.calls[0]["id"].get<std::string>().empty());
    CHECK(st.calls[0]["type"] == "function");
    CHECK(st.calls[0]["function"]["name"] == "get_weather");
    CHECK(json::parse(st.calls[0]["function"]["arguments"].get<std::string>()) == json{{"city", "Paris"}});

    // tool_choice "none": the same reply is text.
    req["stream"] = false;
    req["tool_choice"] = "none";
    const json none = json::parse(c.Post("/v1/chat/completions", req.dump(), "application/json")->body);
    CHECK(none["choices"][0]["finish_reason"] == "stop");
    CHECK(!none["choices"][0]["message"].contains("tool_calls"));

    // The client's next turn: the call and its result (role "tool", tool_call_id) go back into
    // the template; the server renders them and answers.
    json turn = messages;
    turn.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
    turn.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "18 C, sunny"}});
    auto next = c.Post("/v1/chat/completions", json{{"messages", turn}, {"tools", kTools}, {"max_tokens", 4}}.dump(),
                       "application/json");
    REQUIRE(next);
    CHECK_MESSAGE(next->status == 200, next->body);
  }
}

TEST_CASE("a malformed tool call comes back as text with finish_reason stop") {
  const std::string reply = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n</tool_call>";
  ServeProcess server({"-m", model_path(), "--chat-template",
                       (reference_dir() / "templates" / "Qwen-Qwen3-0.6B.jinja").string(), "--parallel", "1", "-c",
                       "512", "--test-reply", write_reply(reply)});
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(120, 0);
  json req = {{"messages", json::array({{{"role", "user"}, {"content", "Weather?"}}})}, {"tools", kTools},
              {"max_tokens", 400}};
  auto res = c.Post("/v1/chat/completions", req.dump(), "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  const json choice = json::parse(res->body)["choices"][0];
  CHECK(choice["finish_reason"] == "stop");
  CHECK(choice["message"]["content"] == reply);
  CHECK(!choice["message"].contains("tool_calls"));
  req["stream"] = true;
  const Streamed st = read_stream(raw_post(server.port(), "/v1/chat/completions", req.dump()));
  CHECK(st.finish == "stop");
  CHECK(st.content == reply);
  CHECK(st.calls.empty());
}

TEST_CASE("bad tools and tool_choice values are refused with 400") {
  ServeProcess server({"-m", model_path(), "--chat-template", "chatml", "--parallel", "1", "-c", "256"});
  httplib::Client c("127.0.0.1", server.port());
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"tools", "x"}}, "'tools' must be an array"},
      {{{"tools", json::array({{{"type", "function"}}})}}, "each of 'tools'"},
      {{{"tool_choice", "auto"}}, "'tool_choice' needs 'tools'"},
      {{{"tools", kTools}, {"tool_choice", "always"}}, "'tool_choice' must be"},
      {{{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}, "'nope'"},
  };
  for (const auto& [fields, why] : bad) {
    CAPTURE(why);
    json req = {{"messages", messages}, {"max_tokens", 2}};
    req.update(fields);
    auto res = c.Post("/v1/chat/completions", req.dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == 400);
    CHECK_MESSAGE(res->body.find(why) != std::string::npos, res->body);
  }
  CHECK(c.Get("/health")->status == 200);
}
