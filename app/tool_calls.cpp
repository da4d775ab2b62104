#include "app/tool_calls.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

namespace sluice::core {

namespace {

using nlohmann::ordered_json;

constexpr std::array<std::string_view, 5> kKimiK2 = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                                                     "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                                                     "<|tool_calls_section_end|>"};
constexpr std::array<std::string_view, 3> kKimiK3 = {"<|open|>", "<|close|>", "<|sep|>"};
constexpr std::array<std::string_view, 5> kDeepSeek = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                                       "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                                                       "<｜tool▁calls▁end｜>"};
constexpr std::array<std::string_view, 2> kQwen3 = {"<tool_call>", "</tool_call>"};
constexpr std::string_view kK3Start = "<|open|>tools<|sep|>";

std::string_view start_marker(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kimi_k2: return kKimiK2[0];
    case ToolSyntax::kimi_k3: return kK3Start;
    case ToolSyntax::deepseek_v31: return kDeepSeek[0];
    case ToolSyntax::qwen3: return kQwen3[0];
    case ToolSyntax::json: return {};
  }
  return {};
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Reads `marker` at the front of `s` (after spaces when `skip_space`); false if absent.
bool take(std::string_view& s, std::string_view marker, bool skip_space = true) {
  std::string_view t = s;
  while (skip_space && !t.empty() && is_space(t.front())) t.remove_prefix(1);
  if (t.substr(0, marker.size()) != marker) return false;
  s = t.substr(marker.size());
  return true;
}

// The text up to `marker` (consumed), or nullopt when it never comes.
std::optional<std::string_view> until(std::string_view& s, std::string_view marker) {
  const size_t at = s.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view out = s.substr(0, at);
  s.remove_prefix(at + marker.size());
  return out;
}

// Arguments as compact JSON of an object; nullopt when they are not one.
std::optional<std::string> json_object_text(const ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// An object's JSON text, or a JSON string holding one (DeepSeek's template writes arguments
// through tojson, so a model may have learnt either).
std::optional<std::string> object_text(std::string_view text) {
  ordered_json j = ordered_json::parse(trim(text), nullptr, false);
  if (j.is_string()) j = ordered_json::parse(j.get<std::string>(), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return json_object_text(j);
}

using Calls = std::vector<ToolCall>;

std::optional<Calls> parse_kimi_k2(std::string_view s) {
  Calls calls;
  if (!take(s, kKimiK2[0])) return std::nullopt;
  for (;;) {
    if (take(s, kKimiK2[4]) || trim(s).empty()) break;  // an unclosed section at the very end is accepted
    if (!take(s, kKimiK2[1])) return std::nullopt;
    const auto id = until(s, kKimiK2[2]);
    const auto args = until(s, kKimiK2[3]);
    if (!id || !args) return std::nullopt;
    std::string_view name = trim(*id);
    if (name.substr(0, 10) == "functions.") name.remove_prefix(10);
    if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) name = name.substr(0, colon);
    const auto a = object_text(*args);
    if (name.empty() || !a) return std::nullopt;
    calls.push_back({std::string(trim(*id)), std::string(name), *a});
  }
  if (!trim(s).empty() || calls.empty()) return std::nullopt;
  return calls;
}

std::optional<Calls> parse_deepseek(std::string_view s) {
  Calls calls;
  if (!take(s, kDeepSeek[0])) return std::nullopt;
  for (;;) {
    if (take(s, kDeepSeek[4]) || trim(s).empty()) break;
    if (!take(s, kDeepSeek[1])) return std::nullopt;
    const auto name = until(s, kDeepSeek[2]);
    const auto args = until(s, kDeepSeek[3]);
    if (!name || !args) return std::nullopt;
    const auto a = object_text(*args);
    if (trim(*name).empty() || !a) return std::nullopt;
    calls.push_back({"", std::string(trim(*name)), *a});
  }
  if (!trim(s).empty() || calls.empty()) return std::nullopt;
  return calls;
}

// One {"name", "arguments"} object (or {"function": {...}}); arguments an object or its JSON text.
std::optional<ToolCall> json_call(const ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  const ordered_json& f = j.contains("function") && j["function"].is_object() ? j["function"] : j;
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) return std::nullopt;
  const ordered_json args = f.contains("arguments") ? f["arguments"]
                            : f.contains("parameters") ? f["parameters"]
                                                       : ordered_json::object();
  const auto a = args.is_string() ? object_text(args.get<std::string>()) : json_object_text(args);
  if (!a) return std::nullopt;
  return ToolCall{"", f["name"].get<std::string>(), *a};
}

std::optional<Calls> parse_qwen3(std::string_view s) {
  Calls calls;
  while (!trim(s).empty()) {
    if (!take(s, kQwen3[0])) return std::nullopt;
    const auto body = until(s, kQwen3[1]);
    if (!body) return std::nullopt;
    const auto call = json_call(ordered_json::parse(trim(*body), nullptr, false));
    if (!call) return std::nullopt;
    calls.push_back(*call);
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

std::optional<Calls> parse_json(std::string_view s) {
  const ordered_json j = ordered_json::parse(trim(s), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  const ordered_json list = j.is_array()                                          ? j
                            : j.is_object() && j.contains("tool_calls") ? j["tool_calls"]
                                                                                  : ordered_json::array({j});
  if (!list.is_array() || list.empty()) return std::nullopt;
  Calls calls;
  for (const auto& x : list) {
    const auto call = json_call(x);
    if (!call) return std::nullopt;
    calls.push_back(*call);
  }
  return calls;
}

// An attribute of a Kimi K3 open tag: name="value", with &quot; and &amp; undone.
std::optional<std::string> attribute(std::string_view tag, std::string_view name) {
  const std::string key = " " + std::string(name) + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t end = tag.find('"', at + key.size());
  if (end == std::string_view::npos) return std::nullopt;
  std::string v(tag.substr(at + key.size(), end - at - key.size()));
  for (size_t p; (p = v.find("&quot;")) != std::string::npos;) v.replace(p, 6, "\"");
  for (size_t p; (p = v.find("&amp;")) != std::string::npos;) v.replace(p, 5, "&");
  return v;
}

std::optional<Calls> parse_kimi_k3(std::string_view s) {
  Calls calls;
  if (!take(s, kK3Start)) return std::nullopt;
  for (;;) {
    if (take(s, "<|close|>tools<|sep|>") || trim(s).empty()) break;
    if (!take(s, "<|open|>call")) return std::nullopt;
    const auto tag = until(s, "<|sep|>");
    if (!tag) return std::nullopt;
    const auto name = attribute(*tag, "tool");
    if (!name || name->empty()) return std::nullopt;
    ordered_json args = ordered_json::object();
    std::optional<std::string> json_block;
    for (;;) {
      if (take(s, "<|close|>call<|sep|>")) break;
      if (take(s, "<|open|>json")) {
        const auto t = until(s, "<|sep|>");
        const auto body = until(s, "<|close|>json<|sep|>");
        if (!t || !body) return std::nullopt;
        json_block = object_text(*body);
        if (!json_block) return std::nullopt;
        continue;
      }
      if (!take(s, "<|open|>argument")) return std::nullopt;
      const auto t = until(s, "<|sep|>");
      const auto value = until(s, "<|close|>argument<|sep|>");
      if (!t || !value) return std::nullopt;
      const auto key = attribute(*t, "key");
      const std::string type = attribute(*t, "type").value_or("string");
      if (!key) return std::nullopt;
      if (type == "string") {
        args[*key] = std::string(*value);
      } else {
        ordered_json v = ordered_json::parse(*value, nullptr, false);
        if (v.is_discarded()) return std::nullopt;
        args[*key] = std::move(v);
      }
    }
    calls.push_back({"", *name, json_block ? *json_block : *json_object_text(args)});
  }
  if (!trim(s).empty() || calls.empty()) return std::nullopt;
  return calls;
}

std::optional<Calls> parse_section(ToolSyntax syntax, std::string_view s) {
  switch (syntax) {
    case ToolSyntax::kimi_k2: return parse_kimi_k2(s);
    case ToolSyntax::kimi_k3: return parse_kimi_k3(s);
    case ToolSyntax::deepseek_v31: return parse_deepseek(s);
    case ToolSyntax::qwen3: return parse_qwen3(s);
    case ToolSyntax::json: return parse_json(s);
  }
  return std::nullopt;
}

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

const char* to_string(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::json: return "json";
    case ToolSyntax::kimi_k2: return "kimi-k2";
    case ToolSyntax::kimi_k3: return "kimi-k3";
    case ToolSyntax::deepseek_v31: return "deepseek-v3.1";
    case ToolSyntax::qwen3: return "qwen3";
  }
  return "json";
}

ToolSyntax tool_syntax_of(std::string_view source) {
  if (source.find(kKimiK2[0]) != std::string_view::npos) return ToolSyntax::kimi_k2;
  if (source.find(kDeepSeek[0]) != std::string_view::npos) return ToolSyntax::deepseek_v31;
  if (source.find("open_tag('tools')") != std::string_view::npos) return ToolSyntax::kimi_k3;
  if (source.find(kQwen3[0]) != std::string_view::npos) return ToolSyntax::qwen3;
  return ToolSyntax::json;
}

std::span<const ToolCallPart> forced_call_parts(ToolSyntax s) {
  using K = ToolCallPart::Kind;
  static constexpr ToolCallPart kK2[] = {
      {K::marker, kKimiK2[0]}, {K::marker, kKimiK2[1]}, {K::text, "functions."}, {K::name}, {K::text, ":0"},
      {K::marker, kKimiK2[2]}, {K::arguments},          {K::marker, kKimiK2[3]}, {K::marker, kKimiK2[4]}};
  static constexpr ToolCallPart kK3[] = {
      {K::marker, "<|open|>"},  {K::text, "tools"},       {K::marker, "<|sep|>"}, {K::marker, "<|open|>"},
      {K::text, "call tool=\""}, {K::name_attr},          {K::text, "\" index=\"1\""}, {K::marker, "<|sep|>"},
      {K::marker, "<|open|>"},  {K::text, "json type=\"object\""}, {K::marker, "<|sep|>"}, {K::arguments},
      {K::marker, "<|close|>"}, {K::text, "json"},        {K::marker, "<|sep|>"}, {K::marker, "<|close|>"},
      {K::text, "call"},        {K::marker, "<|sep|>"},   {K::marker, "<|close|>"}, {K::text, "tools"},
      {K::marker, "<|sep|>"}};
  static constexpr ToolCallPart kDs[] = {{K::marker, kDeepSeek[0]}, {K::marker, kDeepSeek[1]}, {K::name},
                                         {K::marker, kDeepSeek[2]}, {K::arguments},             {K::marker, kDeepSeek[3]},
                                         {K::marker, kDeepSeek[4]}};
  static constexpr ToolCallPart kQw[] = {{K::marker, kQwen3[0]},          {K::text, "\n{\"name\": "}, {K::name_json},
                                         {K::text, ", \"arguments\": "}, {K::arguments},            {K::text, "}\n"},
                                         {K::marker, kQwen3[1]}};
  static constexpr ToolCallPart kJson[] = {
      {K::text, "{\"name\": "}, {K::name_json}, {K::text, ", \"arguments\": "}, {K::arguments}, {K::text, "}"}};
  switch (s) {
    case ToolSyntax::kimi_k2: return kK2;
    case ToolSyntax::kimi_k3: return kK3;
    case ToolSyntax::deepseek_v31: return kDs;
    case ToolSyntax::qwen3: return kQw;
    case ToolSyntax::json: return kJson;
  }
  return kJson;
}

std::span<const std::string_view> tool_markers(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kimi_k2: return kKimiK2;
    case ToolSyntax::kimi_k3: return kKimiK3;
    case ToolSyntax::deepseek_v31: return kDeepSeek;
    case ToolSyntax::qwen3: return kQwen3;
    case ToolSyntax::json: return {};
  }
  return {};
}

ToolCallResult parse_tool_calls(ToolSyntax syntax, std::string_view text) {
  ToolCallResult r;
  const std::string_view start = start_marker(syntax);
  const size_t at = syntax == ToolSyntax::json ? 0 : text.find(start);
  if (at != std::string_view::npos) {
    if (auto calls = parse_section(syntax, text.substr(at))) {
      r.found = true;
      r.content = std::string(text.substr(0, at));
      r.calls = std::move(*calls);
      return r;
    }
  }
  r.content = std::string(text);
  return r;
}

std::string ToolCallStream::push(std::string_view text) {
  held_.append(text);
  if (in_call_) return {};
  if (syntax_ == ToolSyntax::json) {
    if (!decided_) {
      const std::string_view t = trim(held_);
      if (t.empty()) return {};
      decided_ = true;
      in_call_ = t.front() == '{' || t.front() == '[';
      if (in_call_) return {};
    }
    return std::exchange(held_, {});
  }
  const std::string_view start = start_marker(syntax_);
  if (const size_t at = held_.find(start); at != std::string::npos) {
    in_call_ = true;
    std::string out = held_.substr(0, at);
    held_.erase(0, at);
    return out;
  }
  const size_t keep = partial_suffix(held_, start);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ToolCallResult ToolCallStream::finish() {
  ToolCallResult r;
  if (in_call_) r = parse_tool_calls(syntax_, held_);
  else r.content = held_;
  held_.clear();
  return r;
}

}  // namespace sluice::core
