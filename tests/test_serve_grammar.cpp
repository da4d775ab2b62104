// Constrained output through a running sluice serve on the tiny random qwen3moe model (which,
// unconstrained, writes no JSON): response_format json_schema on 20 sampled requests (chat and
// completions, streamed and not, varied seeds and temperatures) whose replies all parse and
// validate; json_object replies parse as objects; llama-server's `grammar` field; tool_choice
// "required" and a named function come back as tool_calls whose arguments follow the tool's
// schema; bad schemas and grammars are a 400 with one clear message.
#include <doctest/doctest.h>

#include <httplib.h>

#include <cctype>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/model_reference.h"
#include "tests/serve_process.h"
#include "tests/sse_events.h"

namespace {

using namespace sluice;
using namespace sluice::test;
using nlohmann::json;

std::string model_path() { return (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string(); }

std::vector<std::string> server_args() {
  return {"-m", model_path(), "--chat-template", (reference_dir() / "templates" / "Qwen-Qwen3-0.6B.jinja").string(),
          "--parallel", "2", "-c", "2048"};
}

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer"},
    "ok": {"type": "boolean"},
    "color": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": ["number", "null"]}},
              "required": ["x", "y"]}
  },
  "required": ["name", "age", "ok", "color", "point"]
})");

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// "" when `v` follows `schema` (the subset the server supports; unknown properties are refused,
// as the grammar writes none), else what is wrong and where.
std::string violation(const json& schema, const json& v, const std::string& where = "$") {
  if (schema.contains("enum")) {
    for (const json& e : schema["enum"])
      if (e == v) return "";
    return where + ": " + v.dump() + " is not in the enum";
  }
  if (schema.contains("const")) return schema["const"] == v ? "" : where + ": not the const";
  if (!schema.contains("type")) return "";
  std::vector<std::string> types;
  if (schema["type"].is_string()) types.push_back(schema["type"]);
  else for (const json& t : schema["type"]) types.push_back(t);
  std::string why = where + ": " + v.dump() + " is not of type " + schema["type"].dump();
  for (const std::string& t : types) {
    if (t == "null" && v.is_null()) return "";
    if (t == "boolean" && v.is_boolean()) return "";
    if (t == "integer" && v.is_number_integer()) return "";
    if (t == "number" && v.is_number()) return "";
    if (t == "string" && v.is_string()) {
      if (schema.contains("maxLength") && code_points(v.get<std::string>()) > schema["maxLength"].get<size_t>())
        return where + ": string longer than maxLength";
      return "";
    }
    if (t == "array" && v.is_array()) {
      if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) return where + ": too many items";
      for (size_t i = 0; i < v.size(); ++i)
        if (auto w = violation(schema.value("items", json::object()), v[i], where + "[" + std::to_string(i) + "]"); !w.empty())
          return w;
      return "";
    }
    if (t == "object" && v.is_object()) {
      const json props = schema.value("properties", json::object());
      for (const json& r : schema.value("required", json::array()))
        if (!v.contains(r.get<std::string>())) return where + ": missing required " + r.dump();
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!props.contains(it.key())) return where + ": unknown property " + it.key();
        if (auto w = violation(props[it.key()], it.value(), where + "." + it.key()); !w.empty()) return w;
      }
      return "";
    }
  }
  return why;
}

struct Reply {
  int status = 0;
  std::string text;    // content (chat) or text (completions)
  std::string finish;
  json tool_calls = json::array();
  std::string body;    // the raw body, for messages
};

Reply post(int port, bool chat, json req) {
  const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
  Reply r;
  if (req.value("stream", false)) {
    r.body = raw_post(port, path, req.dump());
    r.status = r.body.find("data: ") != std::string::npos ? 200 : 0;
    for (const json& e : sse_events(r.body)) {
      const json& ch = e["choices"][0];
      if (chat && ch["delta"].contains("content") && ch["delta"]["content"].is_string()) r.text += ch["delta"]["content"].get<std::string>();
      if (chat && ch["delta"].contains("tool_calls"))
        for (const auto& c : ch["delta"]["tool_calls"]) r.tool_calls.push_back(c);
      if (!chat && ch.contains("text")) r.text += ch["text"].get<std::string>();
      if (!ch["finish_reason"].is_null()) r.finish = ch["finish_reason"];
    }
    return r;
  }
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  auto res = c.Post(path, req.dump(), "application/json");
  REQUIRE(res);
  r.status = res->status;
  r.body = res->body;
  if (r.status != 200) return r;
  const json ch = json::parse(res->body)["choices"][0];
  r.finish = ch["finish_reason"];
  if (chat) {
    if (ch["message"]["content"].is_string()) r.text = ch["message"]["content"];
    if (ch["message"].contains("tool_calls")) r.tool_calls = ch["message"]["tool_calls"];
  } else {
    r.text = ch["text"];
  }
  return r;
}

json base_request(bool chat, const std::string& ask) {
  json req = {{"max_tokens", 400}};
  if (chat) req["messages"] = json::array({{{"role", "user"}, {"content", ask}}});
  else req["prompt"] = ask;
  return req;
}

}  // namespace

TEST_CASE("20 sampled json_schema replies all parse and follow the schema, chat and completions, streamed and not") {
  ServeProcess server(server_args());
  for (int i = 0; i < 20; ++i) {
    const bool chat = i % 2 == 0, stream = i % 4 < 2;
    json req = base_request(chat, "Describe a person as JSON.");
    req["stream"] = stream;
    req["temperature"] = 0.7 + 0.3 * (i % 4);
    req["top_k"] = 0;  // sample from every allowed token: the random model's least JSON-like choices too
    req["top_p"] = 1.0;
    req["min_p"] = 0.0;
    req["seed"] = 1000 + i;
    req["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kSchema}}}};
    CAPTURE(i);
    const Reply r = post(server.port(), chat, req);
    REQUIRE_MESSAGE(r.status == 200, r.body);
    CAPTURE(r.text);
    CHECK(r.finish == "stop");
    const json v = json::parse(r.text, nullptr, false);
    REQUIRE(!v.is_discarded());
    CHECK(violation(kSchema, v) == "");
  }
}

TEST_CASE("json_object replies parse as JSON objects, streamed and not") {
  ServeProcess server(server_args());
  for (const bool stream : {false, true}) {
    json req = base_request(true, "Any JSON object, please.");
    req["stream"] = stream;
    req["temperature"] = 1.0;
    req["seed"] = 7;
    req["max_tokens"] = 1500;
    req["response_format"] = {{"type", "json_object"}};
    const Reply r = post(server.port(), true, req);
    REQUIRE_MESSAGE(r.status == 200, r.body);
    CAPTURE(r.text);
    CHECK(r.finish == "stop");
    const json v = json::parse(r.text, nullptr, false);
    CHECK(v.is_object());
  }
}

TEST_CASE("a GBNF grammar field limits a completion to the grammar's sentences") {
  ServeProcess server(server_args());
  for (int seed = 0; seed < 4; ++seed) {
    json req = base_request(false, "Answer:");
    req["temperature"] = 1.0;
    req["seed"] = seed;
    req["grammar"] = "root ::= (\"yes\" | \"no\") \" \" [0-9]";
    const Reply r = post(server.port(), false, req);
    REQUIRE_MESSAGE(r.status == 200, r.body);
    CHECK(r.finish == "stop");
    CAPTURE(r.text);
    CHECK(r.text.size() == (r.text.rfind("yes", 0) == 0 ? 5u : 4u));
    CHECK((r.text.rfind("yes ", 0) == 0 || r.text.rfind("no ", 0) == 0));
    CHECK(std::isdigit(static_cast<unsigned char>(r.text.back())));
  }
}

TEST_CASE("tool_choice required or a named function forces a tool call whose arguments follow its schema") {
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                     "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}])");
  ServeProcess server(server_args());
  int n = 0;
  for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "get_time"}}}}}) {
    for (const bool stream : {false, true}) {
      json req = base_request(true, "What is the weather in Paris?");
      req["tools"] = tools;
      req["tool_choice"] = choice;
      req["stream"] = stream;
      req["temperature"] = 1.0;
      req["seed"] = 50 + n++;
      req["logprobs"] = true;  // the reply's tokens, to see the syntax it was written in
      CAPTURE(choice.dump());
      CAPTURE(stream);
      const Reply r = post(server.port(), true, req);
      REQUIRE_MESSAGE(r.status == 200, r.body);
      CAPTURE(r.body);
      CHECK(r.finish == "tool_calls");
      REQUIRE(r.tool_calls.size() == 1);
      const json& f = r.tool_calls[0]["function"];
      const std::string name = f["name"];
      if (choice.is_object()) CHECK(name == "get_time");
      const json params = name == "get_weather" ? tools[0]["function"]["parameters"] : tools[1]["function"]["parameters"];
      REQUIRE((name == "get_weather" || name == "get_time"));
      const json args = json::parse(f["arguments"].get<std::string>(), nullptr, false);
      REQUIRE(!args.is_discarded());
      CHECK(violation(params, args) == "");
      // Written in the template family's syntax (Qwen3's <tool_call> lines), not generic JSON.
      std::string raw;
      if (!stream) {
        const json body = json::parse(r.body);
        for (const json& t : body["choices"][0]["logprobs"]["content"]) raw += t["token"].get<std::string>();
      } else {
        for (const json& e : sse_events(r.body))
          if (e["choices"].size() == 1 && e["choices"][0].contains("logprobs") && e["choices"][0]["logprobs"].is_object())
            for (const json& t : e["choices"][0]["logprobs"]["content"]) raw += t["token"].get<std::string>();
      }
      CAPTURE(raw);
      CHECK(raw.rfind("<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ", 0) == 0);
      CHECK(raw.size() >= 14);
      CHECK(raw.substr(raw.size() - 14) == "}\n</tool_call>");
    }
  }
}

TEST_CASE("a bad schema, grammar or response_format is a 400 naming the problem") {
  ServeProcess server(server_args());
  struct Bad {
    json fields;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "string"}, {"pattern", "a+"}}}}}}}},
       "json_schema: 'pattern' is not supported (at $)"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}, "needs 'json_schema': {\"schema\""},
      {{{"response_format", {{"type", "xml"}}}}, "'response_format' must be"},
      {{{"grammar", "root ::= foo"}}, "grammar: rule 'foo' is used but not defined"},
      {{{"grammar", "root ::= \"a"}}, "grammar: unfinished literal"},
      {{{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}, "give only one of"},
  };
  for (const Bad& b : cases) {
    for (const bool chat : {true, false}) {
      json req = base_request(chat, "x");
      req.update(b.fields);
      CAPTURE(req.dump());
      const Reply r = post(server.port(), chat, req);
      CHECK(r.status == 400);
      const json body = json::parse(r.body, nullptr, false);
      REQUIRE(!body.is_discarded());
      CHECK(body["error"]["message"].get<std::string>().find(b.message) != std::string::npos);
    }
  }
}
