// The official `openai` npm client against sluice serve: chat completions, streaming and not,
// give the greedy text of `sluice run` on the same rendered prompt; a tool-call round trip; 20
// sampled json_schema replies. A missing node or package (scripts/setup installs them into
// tests/node) fails the tests.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <string>
#include <nlohmann/json.hpp>

#include "core/text/chat_template.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"
#include "io/pread_reader.h"
#include "tests/model_reference.h"
#include "tests/serve_process.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using nlohmann::json;

std::filesystem::path node_modules() { return std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "node" / "node_modules"; }

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

TEST_CASE("the openai npm client gets sluice run's greedy text, streaming and not") {
  // A missing tool fails the test (scripts/setup installs node and the openai package into tests/node).
  REQUIRE_MESSAGE(std::system("node --version >/dev/null 2>&1") == 0, "node is missing: run scripts/setup");
  REQUIRE_MESSAGE(std::filesystem::exists(node_modules() / "openai"), "the openai npm package is missing: run scripts/setup");
  const std::string model = (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string();
  const json messages = json::array({{{"role", "user"}, {"content", "Write a haiku about disks."}}});
  const int n = 12;

  // sluice run on the rendered prompt's tokens
  io::PreadReader reader(model);
  const core::Tokenizer tok = core::Tokenizer::from_gguf(core::GgufFile::parse(reader));
  const core::ChatTemplate chatml(core::builtin_chat_template("chatml"), "", "", false, false);
  std::string ids;
  for (int32_t t : tok.encode(chatml.apply(nlohmann::ordered_json::parse(messages.dump()), true), true, true))
    ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const CommandResult run = run_sluice("run -m '" + model + "' --tokens " + ids + " -n " + std::to_string(n) + " --temp 0");
  REQUIRE(run.exit_code == 0);
  const std::string expected = as_json_text(run.out.substr(0, run.out.size() - 1));

  ServeProcess server({"-m", model, "--chat-template", "chatml", "--parallel", "2", "-c", "256"});
  const auto out = temp_dir("openai") / "out.json";
  const std::string cmd = "NODE_PATH=" + shell_quote(node_modules().string()) + " node " +
                          shell_quote((std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "openai_client.cjs").string()) +
                          " " + std::to_string(server.port()) + " qwen3moe-q4_k_m " + std::to_string(n) + " " +
                          shell_quote(messages.dump()) + " > " + shell_quote(out.string());
  REQUIRE(std::system(cmd.c_str()) == 0);
  const json got = json::parse(read_text(out));
  CHECK(got["models"][0] == "qwen3moe-q4_k_m");
  CHECK(got["plain"] == got["streamed"]);
  CHECK(got["plain_finish"] == got["stream_finish"]);
  const std::string text = got["plain"];
  if (got["plain_finish"] == "length") CHECK(text == expected);
  else CHECK(expected.rfind(text, 0) == 0);
  CHECK(!text.empty());
}

TEST_CASE("the openai npm client makes a tool-call round trip with a forced Qwen3 tool call, streaming and not") {
  REQUIRE_MESSAGE(std::system("node --version >/dev/null 2>&1") == 0, "node is missing: run scripts/setup");
  REQUIRE_MESSAGE(std::filesystem::exists(node_modules() / "openai"), "the openai npm package is missing: run scripts/setup");
  const std::string model = (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string();
  const auto dir = temp_dir("openai-tools");
  const auto reply = dir / "reply.txt";
  {
    std::ofstream f(reply, std::ios::binary);
    f << "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  }
  ServeProcess server({"-m", model, "--chat-template", (reference_dir() / "templates" / "Qwen-Qwen3-0.6B.jinja").string(),
                       "--parallel", "1", "-c", "1024", "--test-reply", reply.string()});
  const auto out = dir / "out.json";
  const std::string cmd = "NODE_PATH=" + shell_quote(node_modules().string()) + " node " +
                          shell_quote((std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "openai_tools_client.cjs").string()) +
                          " " + std::to_string(server.port()) + " qwen3moe-q4_k_m > " + shell_quote(out.string());
  REQUIRE(std::system(cmd.c_str()) == 0);
  const json got = json::parse(read_text(out));
  CHECK(got["plain_finish"] == "tool_calls");
  CHECK(got["stream_finish"] == "tool_calls");
  REQUIRE(got["plain"]["tool_calls"].size() == 1);
  REQUIRE(got["streamed_calls"].size() == 1);
  for (const json& call : {got["plain"]["tool_calls"][0], got["streamed_calls"][0]}) {
    CHECK(call["function"]["name"] == "get_weather");
    CHECK(json::parse(call["function"]["arguments"].get<std::string>()) == json{{"city", "Paris"}});
  }
  CHECK(got["usage"]["completion_tokens"].get<int>() > 0);
  CHECK(got["usage"]["total_tokens"] == got["usage"]["prompt_tokens"].get<int>() + got["usage"]["completion_tokens"].get<int>());
  CHECK(got["logprobs"].get<int>() > 0);
  CHECK(got["next_finish"].is_string());
}

TEST_CASE("the openai npm client gets 20 sampled json_schema replies that all parse and follow the schema") {
  REQUIRE_MESSAGE(std::system("node --version >/dev/null 2>&1") == 0, "node is missing: run scripts/setup");
  REQUIRE_MESSAGE(std::filesystem::exists(node_modules() / "openai"), "the openai npm package is missing: run scripts/setup");
  const std::string model = (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string();
  const json schema = json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
    "size": {"enum": ["small", "large"]}, "people": {"type": "integer"}}, "required": ["name", "size", "people"],
    "additionalProperties": false})");
  ServeProcess server({"-m", model, "--parallel", "1", "-c", "1024"});
  const auto out = temp_dir("openai-schema") / "out.json";
  const std::string cmd = "NODE_PATH=" + shell_quote(node_modules().string()) + " node " +
                          shell_quote((std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "openai_json_schema_client.cjs").string()) +
                          " " + std::to_string(server.port()) + " qwen3moe-q4_k_m " + shell_quote(schema.dump()) + " > " +
                          shell_quote(out.string());
  REQUIRE(std::system(cmd.c_str()) == 0);
  const json got = json::parse(read_text(out));
  REQUIRE(got.size() == 20);
  std::set<std::string> distinct;
  for (const json& reply : got) {
    CAPTURE(reply.dump());
    CHECK(reply["finish"] == "stop");
    const json v = json::parse(reply["content"].get<std::string>(), nullptr, false);
    REQUIRE(v.is_object());
    CHECK(v.size() == 3);
    CHECK(v["name"].is_string());
    CHECK(v["name"].get<std::string>().size() <= 8 * 4);  // at most 8 characters of at most 4 bytes
    CHECK((v["size"] == "small" || v["size"] == "large"));
    CHECK(v["people"].is_number_integer());
    distinct.insert(reply["content"].get<std::string>());
  }
  CHECK(distinct.size() > 1);  // sampled: the seeds give different replies
}
