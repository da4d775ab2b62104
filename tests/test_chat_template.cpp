// Chat templates: the Jinja subset renders the reference templates (Kimi K2/K3, DeepSeek-V3.1,
// Qwen3, Mixtral, chatml) byte for byte as jinja2 does (tests/data/chat_template_golden.json,
// written by scripts/chat_template_golden.py), and refuses what it cannot render.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "core/text/chat_template.h"
#include "core/text/jinja.h"
#include "synth/synth_preset.h"
#include "tests/test_support.h"

namespace {

using namespace sluice;
using nlohmann::ordered_json;

std::string render(std::string_view tmpl, const ordered_json& ctx = ordered_json::object()) {
  return core::jinja::Template(tmpl).render(ctx);
}

void expect_error(std::string_view tmpl, ErrorCode code, const std::string& text, const ordered_json& ctx = ordered_json::object()) {
  try {
    render(tmpl, ctx);
    FAIL("no error for: " << tmpl);
  } catch (const Error& e) {
    CHECK(e.code() == code);
    CHECK_MESSAGE(std::string(e.what()).find(text) != std::string::npos, e.what());
  }
}

std::string template_source(const std::string& name) {
  if (name == "chatml") return std::string(core::builtin_chat_template("chatml"));
  if (name == "mixtral") return std::string(core::synth::mixtral_chat_template());
  return test::read_text(test::reference_dir() / "templates" / (name + ".jinja"));
}

}  // namespace

TEST_CASE("reference chat templates render exactly as jinja2 renders them") {
  const auto golden = ordered_json::parse(
      test::read_text(std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "data" / "chat_template_golden.json"));
  REQUIRE(golden.size() >= 40);
  int rendered = 0;
  for (const auto& c : golden) {
    const std::string name = c["template"];
    CAPTURE(name);
    // A golden case whose template file is missing fails: reference data is not optional.
    if (name != "chatml" && name != "mixtral")
      REQUIRE(std::filesystem::exists(test::reference_dir() / "templates" / (name + ".jinja")));
    CAPTURE(c["case"].get<std::string>());
    ordered_json ctx = {{"messages", c["messages"]},
                        {"add_generation_prompt", c["add_generation_prompt"]},
                        {"bos_token", c["bos_token"]},
                        {"eos_token", c["eos_token"]}};
    for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it) ctx[it.key()] = it.value();
    const core::jinja::Template t(template_source(name));
    if (c["error"].is_null()) {
      CHECK(t.render(ctx) == c["text"].get<std::string>());
      ++rendered;
    } else {
      try {
        t.render(ctx);
        FAIL("the template should have refused");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find(c["error"].get<std::string>()) != std::string::npos);
      }
    }
  }
  CHECK(rendered >= 30);
}

TEST_CASE("the templates synthesized models carry render as the publishers' files do") {
  const auto golden = ordered_json::parse(
      test::read_text(std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "data" / "chat_template_golden.json"));
  const std::pair<std::string_view, const char*> synth[] = {
      {core::synth::kimi_k2_chat_template(), "Kimi-K2-Instruct"},
      {core::synth::deepseek_v3_chat_template(), "deepseek-ai-DeepSeek-V3.1"},
      {core::synth::qwen3_chat_template(), "Qwen-Qwen3-0.6B"},
      {core::synth::kimi_k3_chat_template(), "Kimi-K3"}};
  int checked = 0;
  for (const auto& [source, name] : synth) {
    const core::jinja::Template t(source);
    for (const auto& c : golden) {
      if (c["template"] != name || c["error"].is_string()) continue;
      CAPTURE(name);
      ordered_json ctx = {{"messages", c["messages"]}, {"add_generation_prompt", c["add_generation_prompt"]},
                          {"bos_token", c["bos_token"]}, {"eos_token", c["eos_token"]}};
      for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it) ctx[it.key()] = it.value();
      CHECK(t.render(ctx) == c["text"].get<std::string>());
      ++checked;
    }
  }
  CHECK(checked >= 25);
}

TEST_CASE("jinja whitespace control follows trim_blocks, lstrip_blocks and dash markers") {
  CHECK(render("  {% if true %}\nx\n  {% endif %}\ny") == "x\ny");
  CHECK(render("a  {%- if true -%}  b  {%- endif -%}  c") == "abc");
  CHECK(render("a {{- 'b' -}} c") == "abc");
  CHECK(render("a {# note #}\nb") == "a b");
  CHECK(render("{% for x in [1, 2, 3] %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}") == "1,2,3");
}

TEST_CASE("jinja expressions: namespaces, slices, methods, filters and tests") {
  CHECK(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") == "6");
  CHECK(render("{{ [1, 2, 3][::-1] }}|{{ 'abc'[1:] }}|{{ [1,2,3][-1] }}") == "[3, 2, 1]|bc|3");
  CHECK(render("{{ 'a</think>b'.split('</think>')[-1] }}{{ '  x '.strip() }}{{ 'ab'.startswith('a') }}") == "bxTrue");
  CHECK(render("{{ {'b': 1, 'a': [true, none, 'é']} | tojson }}") == R"({"b": 1, "a": [true, null, "é"]})");
  CHECK(render("{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ 3 is not string }}") == "FalseTrueTrueTrue");
  CHECK(render("{{ 7 // 2 }} {{ 7 % 3 }} {{ 1 ~ 'a' }} {{ 'x' if false else 'y' }} {{ 'b' in 'abc' }}") == "3 1 1a y True");
  CHECK(render("{% macro m(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}{{ m('x', b='y') }}") == "xdxy");
  CHECK(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}") == "13");
  CHECK(render("{% for k, v in {'b': 2, 'A': 1} | dictsort %}{{ k }}{{ v }}{% endfor %}") == "A1b2");
  CHECK(render("{% set l = [] %}{% set _ = l.append(1) %}{{ l | length }}{{ l.pop(0) }}{{ l | length }}") == "110");
}

TEST_CASE("jinja outside the subset or malformed is refused with the line") {
  expect_error("ok\n{% call foo() %}{% endcall %}", ErrorCode::unsupported, "line 2: the 'call' statement");
  expect_error("{% if true %}x", ErrorCode::invalid_argument, "'if' without 'endif'");
  expect_error("{{ 'x' ", ErrorCode::invalid_argument, "unclosed '{{'");
  expect_error("{% endfor %}", ErrorCode::invalid_argument, "without its opening");
  expect_error("{{ raise_exception('no system role') }}", ErrorCode::invalid_argument, "no system role");
  expect_error("{{ x | frobnicate }}", ErrorCode::invalid_argument, "unknown filter 'frobnicate'");
  expect_error("{{ 1 + 'a' }}", ErrorCode::invalid_argument, "'+' on int and string");
}

TEST_CASE("a chat template strips the BOS its tokenizer adds and is checked at start-up") {
  const core::ChatTemplate t("{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}", "<s>",
                             "</s>", true, false);
  CHECK(t.apply(ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), true) == "[hi]</s>");
}
