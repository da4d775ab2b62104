// The grammar engine (app/grammar/): the GBNF parser and its errors, the stack recognizer over
// bytes (partial UTF-8 included), the token mask's trie walk against a token-by-token check on a
// real vocabulary, JSON Schema -> GBNF, and the sampler's mask hook.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/grammar/gbnf.h"
#include "app/grammar/grammar_matcher.h"
#include "app/grammar/json_schema_grammar.h"
#include "app/sampler.h"
#include "app/tool_calls.h"
#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"
#include "io/pread_reader.h"
#include "tests/model_reference.h"

namespace {

using namespace sluice;
using namespace sluice::core;
using nlohmann::ordered_json;

std::shared_ptr<const Grammar> grammar(const std::string& gbnf) { return std::make_shared<const Grammar>(parse_gbnf(gbnf)); }

// Whether the whole text is a sentence of the grammar.
bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m;
  m.reset(g);
  return m.accept_text(text) && m.can_end();
}

// Whether the text is a prefix of some sentence.
bool prefix(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m;
  m.reset(g);
  return m.accept_text(text);
}

std::string gbnf_error(const std::string& text) {
  try {
    parse_gbnf(text);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    return e.what();
  }
  return "";
}

std::string schema_error(const ordered_json& schema) {
  try {
    json_schema_gbnf(schema);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    return e.what();
  }
  return "";
}

Tokenizer qwen_tokenizer() {
  io::PreadReader reader((test::tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string());
  return Tokenizer::from_gguf(GgufFile::parse(reader));
}

}  // namespace

TEST_CASE("a GBNF grammar accepts exactly the sentences of its language") {
  const auto g = grammar(R"G(# a comment
root ::= "a" b* | "x" [0-9]{2,3} | "(" ( "p" | "q" )+ ")" | [^a-z(] "!"?
b ::= "b" | "c"   # another
)G");
  for (const char* yes : {"a", "abcb", "x12", "x123", "(p)", "(pqqp)", "Z", "Z!", "\xC3\xA9!"}) {
    CAPTURE(yes);
    CHECK(matches(g, yes));
  }
  for (const char* no : {"", "ad", "x1", "x1234", "()", "(pr)", "z", "Z!!", "ab "}) {
    CAPTURE(no);
    CHECK(!matches(g, no));
  }
  CHECK(prefix(g, "x1"));  // a prefix, not yet a sentence
  CHECK(!prefix(g, "y"));
}

TEST_CASE("escapes, dots and multi-line alternatives in parentheses parse as llama.cpp reads them") {
  const auto g = grammar("root ::= \"\\x41\\u00e9\\n\\\"\" . [\\]\\-] (\n  \"1\" |\n  \"2\"\n)\n");
  CHECK(matches(g, "A\xC3\xA9\n\"?]1"));
  CHECK(matches(g, "A\xC3\xA9\n\"\xE2\x82\xAC-2"));
  CHECK(!matches(g, "A\xC3\xA9\n\"?x1"));
}

TEST_CASE("a partial UTF-8 character is carried from one piece to the next") {
  const auto g = grammar("root ::= \"\xC3\xA9\" [\xE2\x82\xAC-\xE2\x82\xAF] \"x\"");
  GrammarMatcher m;
  m.reset(g);
  CHECK(m.accept_text("\xC3"));
  CHECK(!m.can_end());
  CHECK(m.accept_text("\xA9\xE2\x82"));
  CHECK(!m.accept_text("\xB0"));  // U+20B0 is outside the class: rejected, state kept
  CHECK(m.accept_text("\xAC"));   // U+20AC
  CHECK(m.accept_text("x"));
  CHECK(m.can_end());
  GrammarMatcher other;
  other.reset(g);
  CHECK(!other.accept_text("\xC4"));  // no completion of a U+01xx lead byte is U+00E9
}

TEST_CASE("overlong forms, surrogates and stray bytes are not text to a grammar") {
  const auto g = grammar("root ::= [^\"]*");
  CHECK(matches(g, "\xC3\xA9\xF0\x9F\x98\x80"));  // U+00E9, U+1F600
  CHECK(!prefix(g, "\xC1"));                       // only overlong forms of U+0040..U+007F start with C1
  CHECK(!prefix(g, "\xC0\xA2"));                  // an overlong '"'
  CHECK(!prefix(g, "\xE0\x81\x81"));
  CHECK(!prefix(g, "\xED\xA0\x80"));             // U+D800, a surrogate
  CHECK(!prefix(g, "\xF4\x90\x80\x80"));         // past U+10FFFF
  CHECK(!prefix(g, "\x80"));
  CHECK(!prefix(grammar("root ::= \"y\""), "\xC1"));  // the form the mask once let through for 'y'
}

TEST_CASE("bad grammars are rejected with one line naming the problem") {
  CHECK(gbnf_error("root ::= foo").find("rule 'foo' is used but not defined") != std::string::npos);
  CHECK(gbnf_error("start ::= \"a\"").find("no 'root' rule") != std::string::npos);
  CHECK(gbnf_error("root ::= \"a").find("unfinished literal") != std::string::npos);
  CHECK(gbnf_error("root ::= \"a\"\nroot ::= \"b\"").find("defined twice") != std::string::npos);
  CHECK(gbnf_error("root ::= \"a\"\nx ::= x \"b\"").find("rule 'x' is left-recursive") != std::string::npos);
  CHECK(gbnf_error("root ::= (\"a\"?)*").find("left-recursive") != std::string::npos);
  CHECK(gbnf_error("root ::= \"a\"{3,2}").find("n < m") != std::string::npos);
  CHECK(gbnf_error("root ::= [b-a]").find("reversed") != std::string::npos);
  CHECK(gbnf_error("\n\nroot := \"a\"").find("(line 3)") != std::string::npos);
  CHECK(gbnf_error("root ::= \"\\q\"").find("unknown escape") != std::string::npos);
}

TEST_CASE("the token mask allows exactly the tokens a token-by-token check accepts") {
  const Tokenizer tok = qwen_tokenizer();
  const auto vocab = std::make_shared<const GrammarVocab>(tok);
  const auto g = grammar(json_schema_gbnf(ordered_json::parse(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "n": {"type": "integer"},
          "tags": {"type": "array", "items": {"enum": ["red", "gr\u00fcn"]}}}, "required": ["name"]})")));
  // States along one document: the start, inside a string, after a key, in a number, at the end.
  const std::vector<std::string> texts = {"", "{\"name\": \"ab", "{\"name\": \"\xC3", "{\"name\": \"x\", \"n\"",
                                          "{\"name\": \"x\", \"n\": -12", "{\"name\": \"x\", \"tags\": [\"gr", "{\"name\": \"\"}"};
  for (const std::string& text : texts) {
    CAPTURE(text);
    GrammarMatcher m;
    m.reset(g, vocab);
    REQUIRE(m.accept_text(text));
    const size_t n_allowed = m.compute_mask();
    const std::vector<uint8_t> mask(m.mask().begin(), m.mask().end());
    size_t expected = 0, mismatches = 0;
    GrammarMatcher one;  // reset per token: the state after `text`, then the token's text alone
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      bool ok;
      if (tok.is_eog(id)) {
        ok = m.can_end();
      } else {
        const std::string piece = tok.token_to_piece(id, false);
        one.reset(g);
        ok = !piece.empty() && one.accept_text(text) && one.accept_text(piece);
      }
      expected += ok;
      mismatches += ok != (mask[static_cast<size_t>(id)] != 0);
    }
    CHECK(mismatches == 0);
    CHECK(n_allowed == expected);
    CHECK(n_allowed > 0);
  }
}

TEST_CASE("a tokenized JSON object passes the mask token by token and nothing may follow its end") {
  const Tokenizer tok = qwen_tokenizer();
  const auto vocab = std::make_shared<const GrammarVocab>(tok);
  GrammarMatcher m;
  m.reset(grammar(json_object_gbnf()), vocab);
  const std::vector<int32_t> ids = tok.encode("{\"a\": [1, 2, {\"b\": null}], \"c\": \"d\"}", false, false);
  for (int32_t id : ids) {
    REQUIRE(m.compute_mask() > 0);
    REQUIRE(m.mask()[static_cast<size_t>(id)] == 1);
    m.accept(id);
  }
  CHECK(m.can_end());
  CHECK_THROWS_AS(m.accept(tok.encode("x", false, false).at(0)), Error);
}

TEST_CASE("a JSON schema's grammar accepts valid documents and rejects invalid ones") {
  const auto g = grammar(json_schema_gbnf(ordered_json::parse(R"({
    "type": "object", "title": "t", "additionalProperties": false,
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 4},
      "age": {"type": "integer"}, "score": {"type": ["number", "null"]}, "ok": {"type": "boolean"},
      "color": {"enum": ["red", 2, null]}, "kind": {"const": "k"},
      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
      "inner": {"properties": {"x": {"type": "number"}}}
    },
    "required": ["name", "age"]})")));
  for (const char* yes : {R"({"name": "ab", "age": 3})", R"({"name":"abcd","age":-10,"score":1.5e-3,"ok":true})",
                          R"({"name": "a", "age": 0, "score": null, "color": 2, "kind": "k", "tags": ["x", ""],
 "inner": {}})",
                          R"({"name": "\u00e9\n", "age": 1, "inner": {"x": 2}})"}) {
    CAPTURE(yes);
    const std::string text = ordered_json::parse(yes).dump();  // compact, as the grammar's layout allows
    CHECK(matches(g, text));
  }
  CHECK(matches(g, R"({"name": "ab", "age": 3})"));
  for (const char* no : {R"({"age": 3})", R"({"name": "", "age": 3})", R"({"name": "abcde", "age": 3})",
                         R"({"name": "a", "age": 1.5})", R"({"name": "a", "age": 1, "tags": []})",
                         R"({"name": "a", "age": 1, "tags": ["a", "b", "c"]})", R"({"name": "a", "age": 1, "color": "blue"})",
                         R"({"name": "a", "age": 1, "other": 1})", R"({"age": 1, "name": "a"})", R"({"name": "a", "age": 01})"}) {
    CAPTURE(no);
    CHECK(!matches(g, no));
  }
}

TEST_CASE("an object whose properties are all optional takes any ordered subset of them") {
  const auto g = grammar(json_schema_gbnf(
      ordered_json::parse(R"({"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}, "c": {"type": "null"}}})")));
  for (const char* yes : {"{}", R"({"a": null})", R"({"b": null})", R"({"a": null, "c": null})", R"({"a": null, "b": null, "c": null})"})
    CHECK(matches(g, yes));
  for (const char* no : {R"({"b": null, "a": null})", R"({"a": null, })", R"({, "a": null})"}) CHECK(!matches(g, no));
}

TEST_CASE("unsupported or malformed schemas are rejected with the keyword and where it is") {
  CHECK(schema_error(ordered_json::parse(R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "x"}}})")) ==
        "json_schema: 'pattern' is not supported (at $.properties.code)");
  CHECK(schema_error(ordered_json::parse(R"({"anyOf": []})")).find("'anyOf' is not supported") != std::string::npos);
  CHECK(schema_error(ordered_json::parse(R"({"type": "date"})")).find("unknown type 'date'") != std::string::npos);
  CHECK(schema_error(ordered_json::parse(R"({"properties": {"a": {}}, "required": ["b"]})")).find("not in 'properties'") !=
        std::string::npos);
  CHECK(schema_error(ordered_json::parse(R"({"type": "object", "additionalProperties": true})")).find("additionalProperties") !=
        std::string::npos);
  CHECK(schema_error(ordered_json::parse(R"({"type": "string", "maxLength": -1})")).find("'maxLength' must be") != std::string::npos);
  CHECK(schema_error(ordered_json(3)).find("a schema must be an object") != std::string::npos);
}

TEST_CASE("the fixed JSON object grammar accepts nested JSON objects only") {
  const auto g = grammar(json_object_gbnf());
  CHECK(matches(g, R"({"a": [1, -2.5e3, "x\"y", true, null, {}], "b": {"c": []}})"));
  CHECK(!matches(g, "[1]"));
  CHECK(!matches(g, R"({"a": 1,})"));
  CHECK(!matches(g, R"({'a': 1})"));
}

TEST_CASE("a forced tool call's grammar writes one call of the named tool with its parameters") {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])");
  const MarkerItem literal = [](std::string_view m) { return gbnf_literal(m); };
  const auto json_parts = forced_call_parts(ToolSyntax::json);
  const auto any = grammar(tool_call_gbnf(tools, "", json_parts, literal));
  CHECK(matches(any, R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));
  CHECK(matches(any, R"({"name": "now", "arguments": {}})"));
  CHECK(!matches(any, R"({"name": "get_weather", "arguments": {}})"));
  const auto named = grammar(tool_call_gbnf(tools, "now", json_parts, literal));
  CHECK(!matches(named, R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));
  CHECK(matches(named, R"({"name": "now", "arguments": {"x": 1}})"));
}

TEST_CASE("a forced tool call is written in the template family's own syntax, which its parser reads back") {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  const MarkerItem literal = [](std::string_view m) { return gbnf_literal(m); };
  // What each family's template renders for an assistant's call of get_weather(city="Paris").
  const std::vector<std::pair<ToolSyntax, std::string>> calls = {
      {ToolSyntax::kimi_k2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
       "{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolSyntax::kimi_k3,
       "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>"
       "{\"city\": \"Paris\"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"},
      {ToolSyntax::deepseek_v31,
       "<\uFF5Ctool\u2581calls\u2581begin\uFF5C><\uFF5Ctool\u2581call\u2581begin\uFF5C>get_weather<\uFF5Ctool\u2581sep\uFF5C>"
       "{\"city\": \"Paris\"}<\uFF5Ctool\u2581call\u2581end\uFF5C><\uFF5Ctool\u2581calls\u2581end\uFF5C>"},
      {ToolSyntax::qwen3, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
      {ToolSyntax::json, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"},
  };
  for (const auto& [syntax, text] : calls) {
    CAPTURE(to_string(syntax));
    const auto g = grammar(tool_call_gbnf(tools, "", forced_call_parts(syntax), literal));
    CHECK(matches(g, text));
    const ToolCallResult r = parse_tool_calls(syntax, text);
    REQUIRE(r.found);
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == "get_weather");
    CHECK(r.calls[0].arguments == "{\"city\":\"Paris\"}");
    // No family but json takes the generic form.
    if (syntax != ToolSyntax::json) CHECK(!matches(g, calls.back().second));
  }
}

TEST_CASE("a token reference <[id]> admits exactly that token where the grammar waits for it, control tokens included") {
  const Tokenizer tok = qwen_tokenizer();
  const auto vocab = std::make_shared<const GrammarVocab>(tok);
  const int32_t start = tok.find_token("<|im_start|>");
  REQUIRE(start != kNullToken);
  REQUIRE(tok.token_to_piece(start, false).empty());  // a control token: no text to match
  const auto g = grammar("root ::= \"a\" <[" + std::to_string(start) + "]> \"b\"");
  GrammarMatcher m;
  m.reset(g, vocab);
  REQUIRE(m.compute_mask() > 0);
  CHECK(m.mask()[static_cast<size_t>(start)] == 0);
  CHECK_THROWS_AS(m.accept(start), Error);
  m.accept(tok.encode("a", false, false).at(0));
  CHECK(m.compute_mask() == 1);
  CHECK(m.mask()[static_cast<size_t>(start)] == 1);
  m.accept(start);
  CHECK(!m.can_end());
  const int32_t b = tok.encode("b", false, false).at(0);
  REQUIRE(m.compute_mask() > 0);
  CHECK(m.mask()[static_cast<size_t>(b)] == 1);
  CHECK(m.mask()[static_cast<size_t>(start)] == 0);
  m.accept(b);
  CHECK(m.can_end());
  CHECK(gbnf_error("root ::= <[x]>").find("expected a token id") != std::string::npos);
  CHECK(gbnf_error("root ::= <[12").find("expected ']>'") != std::string::npos);
}

TEST_CASE("the sampler picks only tokens the mask allows, greedy and sampled") {
  const std::vector<float> logits = {5.0f, 1.0f, 4.0f, 3.0f};
  const std::vector<uint8_t> allowed = {0, 1, 0, 1};
  Sampler greedy({.temperature = 0.0f}, 4);
  CHECK(greedy.sample(logits) == 0);
  CHECK(greedy.sample(logits, allowed) == 3);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Sampler s({.temperature = 1.5f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = seed}, 4);
    const int32_t t = s.sample(logits, allowed);
    CHECK((t == 1 || t == 3));
  }
}
