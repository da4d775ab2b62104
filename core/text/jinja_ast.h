// The parsed form of a Jinja template (core/text/jinja.h): expression and statement trees.
// jinja_parse.cpp builds them, jinja_eval.cpp walks them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/text/jinja_value.h"

namespace sluice::core::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,   // value
    name,      // name
    attr,      // args[0].name
    index,     // args[0][args[1]]
    slice,     // args[0][args[1]:args[2]:args[3]] (null parts absent)
    call,      // args[0](args[1..], kwargs)
    filter,    // args[0] | name(args[1..], kwargs)
    test,      // args[0] is [not] name(args[1..]); negate
    unary,     // op args[0]: "not", "-", "+"
    binary,    // args[0] op args[1]
    ternary,   // args[0] if args[1] else args[2] (args[2] may be null)
    list,      // [args...]
    dict,      // {keys[i]: args[i]}
  };
  Kind kind = Kind::literal;
  Value value;
  std::string name;  // name, attribute, filter, test, operator
  std::vector<ExprPtr> args;
  std::vector<std::string> kwarg_names;  // call/filter: last kwarg_names.size() args are keywords
  std::vector<ExprPtr> keys;             // dict literal
  bool negate = false;
  int line = 0;
};

struct Node;
using Body = std::vector<Node>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // per param, null when none
  Body body;
};

struct Node {
  enum class Kind { text, output, if_, for_, set, macro, break_, continue_ };
  Kind kind = Kind::text;
  int line = 0;
  std::string text;                  // text
  ExprPtr expr;                      // output, set value, for iterable
  // if: one (condition, body) per if/elif; a null condition is the else branch
  std::vector<std::pair<ExprPtr, Body>> branches;
  // for
  std::vector<std::string> loop_names;
  ExprPtr loop_filter;
  Body body, else_body;
  // set: target name, or target.attr when attr is not empty
  std::string target, attr;
  std::shared_ptr<MacroDef> macro;
};

struct Program {
  Body body;
};

Program parse(std::string_view source);

}  // namespace sluice::core::jinja
