// GBNF grammars (llama.cpp's grammar format) compiled into a flat table for the recognizer
// (app/grammar/grammar_matcher.h).
//
// Accepted text:
//   rule      name ::= alternatives        (a rule ends at a newline outside parentheses)
//   names     [a-zA-Z0-9_-]+; `root` is the start rule; rules may be used before they are defined
//   items     "literal"  [class]  [^negated]  .  name  ( alternatives )  <[id]>
//             <[id]> is one token by its id, as llama.cpp's grammars write it: the way a grammar
//             asks for a control token (a tool-call marker), which has no text to match
//   postfix   *  +  ?  {m}  {m,}  {m,n}
//   escapes   \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH (in literals and classes)
//   comments  # to the end of the line
// Literals and classes are Unicode code points; the text they match is UTF-8.
//
// Compiled form: every alternative of every rule is a run of Elements in `elements`, closed by
// an `end` element. Repetitions, optionals and groups become generated rules (X* is
// R ::= X R | empty, so the recognizer's stacks stay flat over a repetition). A char element
// holds [lo, hi] ranges (`ranges[first, first + count)`), optionally negated.
//
// Rejected with Error(invalid_argument) and the line: syntax errors, an undefined rule, no
// `root`, and left recursion (a rule that can reach itself before consuming a character), which
// a stack recognizer could not expand.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::core {

enum class GrammarElementKind : uint8_t { end, rule_ref, chars, chars_not, token };

struct GrammarElement {
  GrammarElementKind kind = GrammarElementKind::end;
  uint32_t value = 0;  // rule_ref: the rule id; chars/chars_not: index of the first range; token: its id
  uint32_t count = 0;  // chars/chars_not: number of ranges
};

struct Grammar {
  std::vector<GrammarElement> elements;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
  std::vector<std::vector<uint32_t>> rules;           // rule id -> start index of each alternative
  std::vector<std::string> rule_names;                // generated rules are named "name_N"
  uint32_t root = 0;

  // Whether element `e` (chars, chars_not or token) matches the code point c; a token never does.
  bool matches(const GrammarElement& e, uint32_t c) const;
  // Whether it may match some code point in [lo, hi] (a partial UTF-8 character's completions).
  bool may_match(const GrammarElement& e, uint32_t lo, uint32_t hi) const;
};

Grammar parse_gbnf(std::string_view text);

// `text` as a GBNF string literal (quotes included), escaping what the parser reads specially.
std::string gbnf_literal(std::string_view text);

}  // namespace sluice::core
