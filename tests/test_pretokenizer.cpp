// Pre-tokenizer splits on hand-made strings. Every expectation below was derived by hand from
// llama.cpp's regex list (or hand-written scanner) for that type, not by running sluice.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "core/text/pretokenizer.h"

using sluice::core::PreTokenizer;
using Words = std::vector<std::string>;

namespace {

Words split(const char* pre, const std::string& text) { return PreTokenizer::create(pre).split(text); }

}  // namespace

TEST_CASE("gpt-2 splits words, numbers, punctuation runs and contractions") {
  CHECK(split("gpt-2", "Hello world") == Words{"Hello", " world"});
  CHECK(split("gpt-2", "I'm here, don't") == Words{"I", "'m", " here", ",", " don", "'t"});
  CHECK(split("gpt-2", "abc123 3.14") == Words{"abc", "123", " 3", ".", "14"});
  // \s+(?!\S) leaves the last space to the next word; trailing spaces stay together.
  CHECK(split("gpt-2", "  x") == Words{" ", " x"});
  CHECK(split("gpt-2", "a  ") == Words{"a", "  "});
  CHECK(split("gpt-2", "\tx") == Words{"\t", "x"});
  CHECK(split("gpt-2", "") == Words{});
}

TEST_CASE("gpt-2 keeps llama.cpp's scanner quirk: unassigned code points stand alone") {
  // U+0378 is unassigned. llama.cpp's scanner never puts it in a [^\s\p{L}\p{N}] run and emits
  // unmatched code points one by one.
  CHECK(split("gpt-2", "!\xCD\xB8!") == Words{"!", "\xCD\xB8", "!"});
  CHECK(split("gpt-2", "a\xCD\xB8\xCD\xB9" "b") == Words{"a", "\xCD\xB8", "\xCD\xB9", "b"});
}

TEST_CASE("whitespace is llama.cpp's set: NEL is a space, U+180E is not") {
  // "a<NEL><NEL>b": \s+(?!\S) leaves the last NEL to the next match, which is \s+ alone.
  CHECK(split("gpt-2", "a\xC2\x85\xC2\x85" "b") == Words{"a", "\xC2\x85", "\xC2\x85", "b"});
  // U+180E is a format character: it joins a symbol run.
  CHECK(split("gpt-2", "!\xE1\xA0\x8E!") == Words{"!\xE1\xA0\x8E!"});
  CHECK(split("qwen2", "x\xE1\xA0\x8E") == Words{"x", "\xE1\xA0\x8E"});
}

TEST_CASE("malformed UTF-8 comes out of the pre-tokenizer as U+FFFD, as in llama.cpp") {
  // A stray continuation byte and a truncated 3-byte sequence each become one U+FFFD.
  CHECK(split("gpt-2", "a\x80") == Words{"a", "\xEF\xBF\xBD"});
  CHECK(split("gpt-2", "\xE6\x88") == Words{"\xEF\xBF\xBD\xEF\xBF\xBD"});
  // A surrogate decodes (llama.cpp does not reject it) and counts as an "other" character.
  CHECK(split("gpt-2", "!\xED\xA0\x80!x") == Words{"!\xED\xA0\x80!", "x"});
}

TEST_CASE("llama-bpe groups digits by three, folds case in contractions and keeps newlines apart") {
  CHECK(split("llama-bpe", "Hello world") == Words{"Hello", " world"});
  CHECK(split("llama-bpe", "1234567") == Words{"123", "456", "7"});
  CHECK(split("llama-bpe", "I'M OK") == Words{"I", "'M", " OK"});
  CHECK(split("llama-bpe", "x\n\ny") == Words{"x", "\n\n", "y"});
  CHECK(split("llama-bpe", ",\nz") == Words{",\n", "z"});
  // \s*[\r\n]+ ends at the last newline of a whitespace run.
  CHECK(split("llama-bpe", "  \n  x") == Words{"  \n", " ", " x"});
  // One non-letter, non-digit character may lead a letter run.
  CHECK(split("llama-bpe", "$hello") == Words{"$hello"});
  CHECK(split("llama3", "ab12") == split("llama-bpe", "ab12"));
}

TEST_CASE("qwen2 splits single digits and keeps unassigned code points apart like llama.cpp's scanner") {
  CHECK(split("qwen2", "1234") == Words{"1", "2", "3", "4"});
  CHECK(split("qwen2", "Hello, world") == Words{"Hello", ",", " world"});
  CHECK(split("qwen2", "a~~b") == Words{"a", "~~", "b"});
  CHECK(split("qwen2", "!\xCD\xB8!") == Words{"!", "\xCD\xB8", "!"});
}

TEST_CASE("kimi-k2 splits Han runs from other letters without splitting on case") {
  CHECK(split("kimi-k2", "Hello\xE4\xB8\x96\xE7\x95\x8CWorld") ==
        Words{"Hello", "\xE4\xB8\x96\xE7\x95\x8C", "World"});  // Hello世界World
  // The published regex would cut "HelloWorld" at the capital; llama.cpp's scanner does not.
  CHECK(split("kimi-k2", "HelloWorld") == Words{"HelloWorld"});
  CHECK(split("kimi-k2", "I'm") == Words{"I'm"});
  CHECK(split("kimi-k2", "YOU'RE") == Words{"YOU'RE"});
  CHECK(split("kimi-k2", "\xE4\xBB\x96's") == Words{"\xE4\xBB\x96", "'s"});  // 他's
  CHECK(split("kimi-k2", "12345") == Words{"123", "45"});
  CHECK(split("kimi-k2", " \xE4\xBD\xA0\xE5\xA5\xBD") == Words{" ", "\xE4\xBD\xA0\xE5\xA5\xBD"});  // " 你好"
  // Hiragana is a letter outside the Han blocks: 日本 then ご.
  CHECK(split("kimi-k2", "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\x94") == Words{"\xE6\x97\xA5\xE6\x9C\xAC", "\xE3\x81\x94"});
  // A combining mark is not a letter to the scanner: it leads the next letter run instead.
  CHECK(split("kimi-k2", "e\xCC\x81x") == Words{"e", "\xCC\x81x"});
  CHECK(split("kimi-k2", "a, b!\n\nc") == Words{"a", ",", " b", "!\n\n", "c"});
}

TEST_CASE("deepseek-v3 cuts numbers, then CJK, then words and symbols") {
  CHECK(split("deepseek-v3", "1234") == Words{"123", "4"});
  CHECK(split("deepseek-v3", "abc\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E" "def") ==
        Words{"abc", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "def"});  // abc日本語def
  CHECK(split("deepseek-v3", "Hello, world!") == Words{"Hello", ",", " world", "!"});
  CHECK(split("deepseek-v3", ".hello") == Words{".hello"});
  CHECK(split("deepseek-v3", "3.14") == Words{"3", ".", "14"});
  CHECK(split("deepseek-v3", "abc123def") == Words{"abc", "123", "def"});
  // Combining marks belong to the letter run ([\p{L}\p{M}]+).
  CHECK(split("deepseek-v3", "e\xCC\x81x") == Words{"e\xCC\x81x"});
}

TEST_CASE("deepseek-v3 treats '~' as a symbol, as llama.cpp does since #26972") {
  // A symbol cannot lead a letter run; " ~~~" is one symbol run with its space.
  CHECK(split("deepseek-v3", "~\xC3\xA9") == Words{"~", "\xC3\xA9"});  // ~é
  CHECK(split("deepseek-v3", "x ~~~") == Words{"x", " ~~~"});
  // Text no alternative matches (a lone zero-width joiner) stays one word per gap.
  CHECK(split("deepseek-v3", "a \xE2\x80\x8D\xE2\x80\x8D") == Words{"a", " ", "\xE2\x80\x8D\xE2\x80\x8D"});
}

TEST_CASE("deepseek-llm cuts newlines first and keeps a space in front of words") {
  CHECK(split("deepseek-llm", "Hello world\n") == Words{"Hello", " world", "\n"});
  CHECK(split("deepseek-llm", "a  b") == Words{"a", " ", " b"});
  CHECK(split("deepseek-llm", "x 123") == Words{"x", " ", "123"});
}

TEST_CASE("an unknown pre-tokenizer is refused with its name") {
  try {
    PreTokenizer::create("no-such-pre");
    FAIL("accepted");
  } catch (const sluice::Error& e) {
    CHECK(e.code() == sluice::ErrorCode::unsupported);
    CHECK(std::string(e.what()).find("'no-such-pre'") != std::string::npos);
  }
}
