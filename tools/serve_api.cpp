#include "tools/serve_api.h"

#include <algorithm>
#include <cmath>

#include "app/grammar/json_schema_grammar.h"
#include "app/token_logprobs.h"
#include "common/error.h"
#include "tools/bounded_json.h"

namespace sluice::tools {

namespace {

using nlohmann::ordered_json;

constexpr size_t kMaxStops = 4;
constexpr size_t kMaxStopBytes = 256;
constexpr size_t kMaxMessages = 4096;

bool number_in(const ordered_json& v, double lo, double hi) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo && v.get<double>() <= hi;
}

std::optional<std::string> content_text(const ordered_json& c, std::string& why) {
  if (c.is_null()) return std::string();
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    why = "content must be a string or an array of parts";
    return std::nullopt;
  }
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      why = "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported";
      return std::nullopt;
    }
    out += part["text"].get<std::string>();
  }
  return out;
}

// logprobs / top_logprobs and stream_options, in OpenAI's forms for each endpoint.
std::optional<std::string> parse_agent_options(const ordered_json& j, ApiRequest& r) {
  auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto count_in = [&](const char* key, int64_t hi) {
    return j[key].is_number_integer() && j[key].get<int64_t>() >= 0 && j[key].get<int64_t>() <= hi;
  };
  if (r.chat) {
    if (given("logprobs")) {
      if (!j["logprobs"].is_boolean()) return "'logprobs' must be true or false";
      if (j["logprobs"].get<bool>()) r.top_logprobs = 0;
    }
    if (given("top_logprobs")) {
      if (!count_in("top_logprobs", core::kMaxTopLogprobs)) return "'top_logprobs' must be an integer in [0, 20]";
      if (r.top_logprobs < 0) return "'top_logprobs' needs 'logprobs': true";
      r.top_logprobs = j["top_logprobs"].get<int>();
    }
  } else if (given("logprobs")) {
    if (!count_in("logprobs", core::kMaxTopLogprobs)) return "'logprobs' must be an integer in [0, 20]";
    r.top_logprobs = j["logprobs"].get<int>();
  }
  if (given("stream_options")) {
    const ordered_json& o = j["stream_options"];
    if (!o.is_object()) return "'stream_options' must be an object";
    if (o.contains("include_usage") && !o["include_usage"].is_null()) {
      if (!o["include_usage"].is_boolean()) return "'stream_options.include_usage' must be true or false";
      r.include_usage = o["include_usage"].get<bool>();
    }
  }
  return std::nullopt;
}

// tools: an array of {"type": "function", "function": {"name": ...}}; tool_choice: "auto",
// "none", "required" or {"type": "function", "function": {"name": a declared tool}}.
std::optional<std::string> parse_tool_options(const ordered_json& j, ApiRequest& r, std::string& forced_gbnf,
                                              const ToolGrammar& how) {
  const core::MarkerItem marker = how.marker ? how.marker : [](std::string_view m) { return core::gbnf_literal(m); };
  const auto parts = core::forced_call_parts(how.syntax);
  std::vector<std::string> names;
  const bool has_tools = j.contains("tools") && !j["tools"].is_null();
  if (has_tools) {
    if (!j["tools"].is_array()) return "'tools' must be an array";
    for (const auto& t : j["tools"]) {
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string() ||
          t["function"]["name"].get<std::string>().empty())
        return "each of 'tools' must be {\"type\": \"function\", \"function\": {\"name\": ...}}";
      names.push_back(t["function"]["name"]);
    }
  }
  r.parse_tools = !names.empty();
  if (!j.contains("tool_choice") || j["tool_choice"].is_null()) return std::nullopt;
  const ordered_json& c = j["tool_choice"];
  if (c == "none") {
    r.parse_tools = false;
    return std::nullopt;
  }
  if (names.empty()) return "'tool_choice' needs 'tools'";
  if (c == "auto") return std::nullopt;
  if (c == "required") {
    r.forced_tool_call = true;
    forced_gbnf = core::tool_call_gbnf(j["tools"], "", parts, marker);
    return std::nullopt;
  }
  if (c.is_object() && c.value("type", "") == "function" && c.contains("function") && c["function"].is_object() &&
      c["function"].contains("name") && c["function"]["name"].is_string()) {
    const std::string name = c["function"]["name"];
    if (std::find(names.begin(), names.end(), name) == names.end())
      return "'tool_choice' names '" + name + "', which is not in 'tools'";
    r.forced_tool_call = true;
    forced_gbnf = core::tool_call_gbnf(j["tools"], name, parts, marker);
    return std::nullopt;
  }
  return "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
}

// response_format, grammar and json_schema (and a forced tool call's grammar, `forced_gbnf`)
// into r.grammar; a bad schema or grammar is the request's error.
std::optional<std::string> parse_constraints(const ordered_json& j, ApiRequest& r, const std::string& forced_gbnf) {
  auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  std::string gbnf = forced_gbnf;
  std::string source = forced_gbnf.empty() ? "" : "a forced tool call ('tool_choice')";
  auto take = [&](std::string text, const char* what) -> std::optional<std::string> {
    if (!source.empty()) return std::string("give only one of 'response_format', 'grammar', 'json_schema' and a forced "
                                            "tool call; this request has ") + what + " and " + source;
    gbnf = std::move(text);
    source = what;
    return std::nullopt;
  };
  try {
    if (given("response_format")) {
      const ordered_json& f = j["response_format"];
      const std::string type = f.is_object() && f.contains("type") && f["type"].is_string() ? f["type"].get<std::string>() : "";
      if (type == "json_object") {
        const bool schema = f.contains("schema") && !f["schema"].is_null();
        if (auto e = take(schema ? core::json_schema_gbnf(f["schema"]) : core::json_object_gbnf(), "'response_format'")) return e;
      } else if (type == "json_schema") {
        if (!f.contains("json_schema") || !f["json_schema"].is_object() || !f["json_schema"].contains("schema"))
          return "'response_format' of type \"json_schema\" needs 'json_schema': {\"schema\": {...}}";
        if (auto e = take(core::json_schema_gbnf(f["json_schema"]["schema"]), "'response_format'")) return e;
      } else if (type != "text") {
        return "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
               "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {...}}}";
      }
    }
    if (given("json_schema")) {
      if (auto e = take(core::json_schema_gbnf(j["json_schema"]), "'json_schema'")) return e;
    }
    if (given("grammar")) {
      if (!j["grammar"].is_string() || j["grammar"].get<std::string>().empty()) return "'grammar' must be a non-empty GBNF string";
      if (auto e = take(j["grammar"].get<std::string>(), "'grammar'")) return e;
    }
    if (!gbnf.empty()) r.grammar = std::make_shared<const core::Grammar>(core::parse_gbnf(gbnf));
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

ordered_json error_body(int status, const std::string& message) {
  const char* type = status == 404 ? "not_found_error"
                     : status == 503 ? "server_busy"
                     : status == 413 ? "request_too_large"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
}

ordered_json usage_body(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

std::optional<ApiRequest> parse_request(const std::string& body, bool chat, ApiError& error,
                                        const ToolGrammar& tool_grammar) {
  auto bad = [&](const std::string& m) {
    error = {400, m};
    return std::nullopt;
  };
  if (const std::string limit = json_limit_error(body); !limit.empty()) return bad(limit);
  ordered_json j = ordered_json::parse(body, nullptr, false);
  if (j.is_discarded()) return bad("the body is not valid JSON");
  if (!j.is_object()) return bad("the body must be a JSON object");
  ApiRequest r;
  r.chat = chat;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) return bad("'model' must be a string");
    r.model = j["model"];
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return bad("'stream' must be true or false");
    r.stream = j["stream"];
  }
  for (const char* key : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1)
      return bad(std::string("'") + key + "' must be a positive integer");
    r.max_tokens = j[key];
  }
  if (j.contains("cache_prompt") && !j["cache_prompt"].is_null()) {
    if (!j["cache_prompt"].is_boolean()) return bad("'cache_prompt' must be true or false");
    r.cache_prompt = j["cache_prompt"];
  }
  if (j.contains("n") && !j["n"].is_null() && j["n"] != 1) return bad("'n' must be 1 (one choice per request)");
  core::SamplerOptions& s = r.sampling;
  s.temperature = 0.8f;  // llama-server's defaults
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    if (!number_in(j["temperature"], 0, 100)) return bad("'temperature' must be a number in [0, 100]");
    s.temperature = j["temperature"].get<float>();
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    if (!number_in(j["top_p"], 0, 1)) return bad("'top_p' must be a number in [0, 1]");
    s.top_p = j["top_p"].get<float>();
  }
  if (j.contains("min_p") && !j["min_p"].is_null()) {
    if (!number_in(j["min_p"], 0, 1)) return bad("'min_p' must be a number in [0, 1]");
    s.min_p = j["min_p"].get<float>();
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    if (!j["top_k"].is_number_integer() || j["top_k"].get<int64_t>() < 0 || j["top_k"].get<int64_t>() > 1 << 20)
      return bad("'top_k' must be an integer >= 0");
    s.top_k = j["top_k"].get<int>();
  }
  if (j.contains("repeat_penalty") && !j["repeat_penalty"].is_null()) {
    if (!number_in(j["repeat_penalty"], 0, 100) || j["repeat_penalty"].get<double>() <= 0)
      return bad("'repeat_penalty' must be a number in (0, 100]");
    s.repeat_penalty = j["repeat_penalty"].get<float>();
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) return bad("'seed' must be an integer");
    s.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const ordered_json& st = j["stop"];
    if (st.is_string()) r.stop.push_back(st);
    else if (st.is_array()) for (const auto& x : st) {
      if (!x.is_string()) return bad("'stop' must be a string or an array of strings");
      r.stop.push_back(x);
    }
    else return bad("'stop' must be a string or an array of strings");
    if (r.stop.size() > kMaxStops) return bad("'stop' takes at most 4 strings");
    for (const auto& x : r.stop)
      if (x.empty() || x.size() > kMaxStopBytes) return bad("each 'stop' string must have 1 to 256 bytes");
  }
  if (auto why = parse_agent_options(j, r)) return bad(*why);
  std::string forced_gbnf;  // tool_choice "required" or a named function
  if (chat) {
    if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
      return bad("'messages' must be a non-empty array");
    if (j["messages"].size() > kMaxMessages) return bad("'messages' has more than 4096 entries");
    r.messages = ordered_json::array();
    for (const auto& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        return bad("each message must be an object with a string 'role'");
      std::string why;
      auto text = content_text(m.contains("content") ? m["content"] : ordered_json(), why);
      if (!text) return bad("message content: " + why);
      ordered_json n = m;
      n["content"] = *text;
      r.messages.push_back(std::move(n));
    }
    try {
      if (auto why = parse_tool_options(j, r, forced_gbnf, tool_grammar)) return bad(*why);
    } catch (const Error& e) {
      return bad(e.what());
    }
    r.template_extra = ordered_json::object();
    if (j.contains("tools") && j["tools"].is_array() && !j["tools"].empty()) r.template_extra["tools"] = j["tools"];
    if (j.contains("chat_template_kwargs") && j["chat_template_kwargs"].is_object())
      for (auto it = j["chat_template_kwargs"].begin(); it != j["chat_template_kwargs"].end(); ++it)
        r.template_extra[it.key()] = it.value();
  } else {
    if (!j.contains("prompt")) return bad("'prompt' is required");
    const ordered_json& p = j["prompt"];
    if (p.is_string()) {
      r.prompt_text = p;
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt_text = p[0];
    } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const auto& x) { return x.is_number_integer(); })) {
      for (const auto& x : p) {
        const int64_t v = x;
        if (v < 0 || v > INT32_MAX) return bad("prompt token " + std::to_string(v) + " is not a token id");
        r.prompt_tokens.push_back(static_cast<int32_t>(v));
      }
    } else {
      return bad("'prompt' must be a string, one string in an array, or an array of token ids");
    }
  }
  if (auto why = parse_constraints(j, r, forced_gbnf)) return bad(*why);
  return r;
}

}  // namespace sluice::tools
