// Tool calls in a model's reply (app/tool_calls.h): each family's syntax, from fixture strings and
// from what the family's real chat template writes for an assistant message with tool_calls,
// parses back into the calls; malformed sections stay text; a stream holds back only what may be
// a call.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "app/tool_calls.h"
#include "core/text/chat_template.h"
#include "tests/test_support.h"

namespace {

using namespace sluice;
using core::ToolSyntax;
using nlohmann::ordered_json;

std::string source(const std::string& name) {
  return test::read_text(test::reference_dir() / "templates" / (name + ".jinja"));
}

void check_calls(const core::ToolCallResult& r, const std::string& content, const std::vector<std::pair<std::string, std::string>>& calls) {
  REQUIRE(r.found);
  CHECK(r.content == content);
  REQUIRE(r.calls.size() == calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(r.calls[i].name == calls[i].first);
    CHECK(ordered_json::parse(r.calls[i].arguments) == ordered_json::parse(calls[i].second));
  }
}

// The whole text in small pieces through a stream: content as pushed plus the result of finish().
core::ToolCallResult streamed(ToolSyntax syntax, const std::string& text, std::string& pushed) {
  core::ToolCallStream s(syntax);
  pushed.clear();
  for (size_t i = 0; i < text.size(); i += 3) pushed += s.push(text.substr(i, 3));
  return s.finish();
}

}  // namespace

TEST_CASE("each reference template names its tool-call syntax") {
  CHECK(core::tool_syntax_of(source("Kimi-K2-Instruct")) == ToolSyntax::kimi_k2);
  CHECK(core::tool_syntax_of(source("Kimi-K3")) == ToolSyntax::kimi_k3);
  CHECK(core::tool_syntax_of(source("deepseek-ai-DeepSeek-V3.1")) == ToolSyntax::deepseek_v31);
  CHECK(core::tool_syntax_of(source("Qwen-Qwen3-0.6B")) == ToolSyntax::qwen3);
  CHECK(core::tool_syntax_of(core::builtin_chat_template("chatml")) == ToolSyntax::json);
}

TEST_CASE("fixture replies of every family parse into tool calls") {
  check_calls(core::parse_tool_calls(ToolSyntax::kimi_k2,
                                     "Let me look.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                                     "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
                                     "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}"
                                     "<|tool_call_end|><|tool_calls_section_end|>"),
              "Let me look.", {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}});
  const auto k2 = core::parse_tool_calls(ToolSyntax::kimi_k2,
                                         "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:7"
                                         "<|tool_call_argument_begin|>{\"a\":1}<|tool_call_end|><|tool_calls_section_end|>");
  REQUIRE(k2.calls.size() == 1);
  CHECK(k2.calls[0].id == "functions.f:7");

  check_calls(core::parse_tool_calls(ToolSyntax::deepseek_v31,
                                     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                                     "{\"city\": \"Paris\", \"days\": [1, 2]}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
              "", {{"get_weather", R"({"city":"Paris","days":[1,2]})"}});

  check_calls(core::parse_tool_calls(ToolSyntax::qwen3,
                                     "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                     "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                                     "\"arguments\": {}}\n</tool_call>"),
              "I will check.\n", {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}});

  check_calls(core::parse_tool_calls(ToolSyntax::kimi_k3,
                                     "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
                                     "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris & \"Lyon\"<|close|>argument<|sep|>"
                                     "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
                                     "<|close|>call<|sep|><|open|>call tool=\"get_time\" index=\"2\"<|sep|>"
                                     "<|open|>json type=\"object\"<|sep|>{\"tz\": \"UTC\"}<|close|>json<|sep|>"
                                     "<|close|>call<|sep|><|close|>tools<|sep|>"),
              "", {{"get_weather", R"({"city":"Paris & \"Lyon\"","days":3})"}, {"get_time", R"({"tz":"UTC"})"}});

  check_calls(core::parse_tool_calls(ToolSyntax::json, " {\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n"),
              "", {{"get_time", R"({"tz":"UTC"})"}});
  check_calls(core::parse_tool_calls(ToolSyntax::json,
                                     R"({"tool_calls": [{"function": {"name": "a", "arguments": "{\"x\": 1}"}}, {"name": "b"}]})"),
              "", {{"a", R"({"x":1})"}, {"b", "{}"}});
}

TEST_CASE("malformed tool-call sections stay text") {
  const std::vector<std::pair<ToolSyntax, std::string>> bad = {
      {ToolSyntax::kimi_k2, "x<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":"},
      {ToolSyntax::kimi_k2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]<|tool_call_end|>"},
      {ToolSyntax::deepseek_v31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>not json<｜tool▁call▁end｜>"},
      {ToolSyntax::qwen3, "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},
      {ToolSyntax::qwen3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"},
      {ToolSyntax::qwen3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> and more"},
      {ToolSyntax::kimi_k3, "<|open|>tools<|sep|><|open|>call index=\"1\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"},
      {ToolSyntax::json, "{\"name\": \"f\", \"arguments\": 3}"},
      {ToolSyntax::json, "Plain words."},
  };
  for (const auto& [syntax, text] : bad) {
    CAPTURE(text);
    const core::ToolCallResult r = core::parse_tool_calls(syntax, text);
    CHECK(!r.found);
    CHECK(r.content == text);
    CHECK(r.calls.empty());
    std::string pushed;
    const core::ToolCallResult s = streamed(syntax, text, pushed);
    CHECK(!s.found);
    CHECK(pushed + s.content == text);
  }
}

TEST_CASE("a stream sends text before a call at once and holds back only a possible call") {
  const std::string text = "Checking <tool now.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  std::string pushed;
  const core::ToolCallResult r = streamed(ToolSyntax::qwen3, text, pushed);
  CHECK(pushed == "Checking <tool now.\n");
  check_calls(r, "", {{"f", R"({"a":1})"}});
  const core::ToolCallResult plain = streamed(ToolSyntax::qwen3, "No call <tool here", pushed);
  CHECK(!plain.found);
  CHECK(pushed + plain.content == "No call <tool here");
  CHECK(pushed == "No call <tool here");  // "<tool" followed by " " is no marker: sent before the end
}

TEST_CASE("what each real template writes for an assistant tool call parses back into that call") {
  const ordered_json calls = ordered_json::array(
      {{{"id", "call_0"}, {"type", "function"},
        {"function", {{"name", "get_weather"}, {"arguments", ordered_json{{"city", "Paris"}, {"days", 2}}}}}}});
  const ordered_json messages = ordered_json::array({{{"role", "user"}, {"content", "Weather?"}},
                                                     {{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}}});
  const std::vector<std::tuple<std::string, ToolSyntax, std::string, std::string>> cases = {
      {"Kimi-K2-Instruct", ToolSyntax::kimi_k2, "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"},
      {"deepseek-ai-DeepSeek-V3.1", ToolSyntax::deepseek_v31, "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"},
      {"Qwen-Qwen3-0.6B", ToolSyntax::qwen3, "<tool_call>", "</tool_call>"},
      {"Kimi-K3", ToolSyntax::kimi_k3, "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"},
  };
  for (const auto& [name, syntax, begin, end] : cases) {
    CAPTURE(name);
    const core::ChatTemplate t(source(name), "", "", false, false);
    const std::string text = t.apply(messages, false);
    const size_t at = text.find(begin);
    REQUIRE(at != std::string::npos);
    const size_t stop = text.find(end, at);
    REQUIRE(stop != std::string::npos);
    const std::string section = text.substr(at, stop + end.size() - at);
    check_calls(core::parse_tool_calls(syntax, "Sure." + section), "Sure.", {{"get_weather", R"({"city":"Paris","days":2})"}});
  }
}
