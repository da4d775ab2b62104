// Jinja template -> Program: tag splitting with jinja2's whitespace rules (trim_blocks,
// lstrip_blocks, '-' markers), then a recursive-descent parser with jinja2's precedence:
//   ternary < or < and < not < comparison/in < + - < ~ < * / // % < unary - < postfix, | filter, is test
#include <cctype>
#include <set>

#include "common/error.h"
#include "core/text/jinja_ast.h"

namespace sluice::core::jinja {

namespace {

struct Segment {
  enum class Kind { text, expr, stmt } kind;
  std::string body;
  int line;
};

int line_of(std::string_view src, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < src.size(); ++i) line += src[i] == '\n';
  return line;
}

Error syntax(int line, const std::string& what) {
  return Error(ErrorCode::invalid_argument, "chat template line " + std::to_string(line) + ": " + what);
}
Error unsupported(int line, const std::string& what) {
  return Error(ErrorCode::unsupported, "chat template line " + std::to_string(line) + ": " + what +
                                           " is outside the Jinja subset sluice renders (use --chat-template)");
}

// Finds the closing delimiter, skipping quoted strings inside expressions and statements.
size_t find_close(std::string_view src, size_t from, std::string_view close, bool quotes) {
  char q = 0;
  for (size_t i = from; i + 1 < src.size() + 1; ++i) {
    const char c = src[i];
    if (q) {
      if (c == '\\') ++i;
      else if (c == q) q = 0;
      continue;
    }
    if (quotes && (c == '\'' || c == '"')) q = c;
    else if (src.substr(i, close.size()) == close) return i;
  }
  return std::string_view::npos;
}

std::vector<Segment> split(std::string_view src) {
  std::vector<Segment> out;
  size_t pos = 0;
  bool strip_next = false;
  while (pos <= src.size()) {
    size_t start = pos < src.size() ? pos : std::string_view::npos;
    while (start < src.size()) {
      start = src.find('{', start);
      if (start == std::string_view::npos || start + 1 >= src.size()) { start = std::string_view::npos; break; }
      const char k = src[start + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++start;
    }
    const size_t text_end = start == std::string_view::npos ? src.size() : start;
    std::string text(src.substr(pos, text_end - pos));
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    }
    strip_next = false;
    if (start != std::string_view::npos) {
      const char k = src[start + 1];
      const char marker = start + 2 < src.size() ? src[start + 2] : 0;
      if (marker == '-') {
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      } else if (k != '{' && marker != '+') {  // lstrip_blocks
        size_t b = text_end;
        while (b > pos && (src[b - 1] == ' ' || src[b - 1] == '\t')) --b;
        if ((b == 0 || src[b - 1] == '\n') && text.size() >= text_end - b) text.resize(text.size() - (text_end - b));
      }
    }
    if (!text.empty()) out.push_back({Segment::Kind::text, std::move(text), line_of(src, pos)});
    if (start == std::string_view::npos) break;
    const char k = src[start + 1];
    const std::string_view close = k == '{' ? "}}" : (k == '%' ? "%}" : "#}");
    const size_t end = find_close(src, start + 2, close, k != '#');
    const int line = line_of(src, start);
    if (end == std::string_view::npos) throw syntax(line, std::string("unclosed '{") + k + "'");
    std::string body(src.substr(start + 2, end - start - 2));
    if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.erase(0, 1);
    if (!body.empty() && body.back() == '-') {
      body.pop_back();
      strip_next = true;
    }
    if (k == '{') out.push_back({Segment::Kind::expr, std::move(body), line});
    else if (k == '%') out.push_back({Segment::Kind::stmt, std::move(body), line});
    pos = end + 2;
    if (!strip_next && k != '{') {  // trim_blocks
      if (pos < src.size() && src[pos] == '\n') ++pos;
      else if (pos + 1 < src.size() && src[pos] == '\r' && src[pos + 1] == '\n') pos += 2;
    }
  }
  return out;
}

struct Token {
  enum class Kind { name, string, integer, number, op, end } kind = Kind::end;
  std::string text;
  int64_t i = 0;
  double d = 0;
};

std::vector<Token> lex(std::string_view s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::name, std::string(s.substr(i, j - i))});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      const bool frac = j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]));
      if (frac) {
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        Token t{Token::Kind::number, std::string(s.substr(i, j - i))};
        t.d = std::stod(t.text);
        out.push_back(t);
      } else {
        Token t{Token::Kind::integer, std::string(s.substr(i, j - i))};
        try {
          t.i = std::stoll(t.text);
        } catch (const std::exception&) {
          throw syntax(line, "integer '" + t.text + "' is out of range");
        }
        out.push_back(t);
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) { v += s[j]; continue; }
        const char e = s[++j];
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          default: v += '\\'; v += e;
        }
      }
      if (j >= s.size()) throw syntax(line, "unterminated string");
      out.push_back({Token::Kind::string, std::move(v)});
      i = j + 1;
    } else {
      static const char* ops[] = {"//", "==", "!=", "<=", ">=", "**", "+", "-", "*", "/", "%", "~", "(", ")", "[",
                                  "]", "{", "}", ",", ".", ":", "|", "=", "<", ">"};
      bool found = false;
      for (const char* op : ops) {
        const std::string_view o(op);
        if (s.substr(i, o.size()) == o) {
          out.push_back({Token::Kind::op, std::string(o)});
          i += o.size();
          found = true;
          break;
        }
      }
      if (!found) throw syntax(line, std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::Kind::end, ""});
  return out;
}

class ExprParser {
 public:
  ExprParser(std::vector<Token> toks, int line) : t_(std::move(toks)), line_(line) {}

  ExprPtr expression() {
    ExprPtr e = or_expr();
    if (is_name("if")) {
      ++p_;
      auto n = make(Expr::Kind::ternary);
      n->args.push_back(std::move(e));
      n->args.push_back(or_expr());
      if (is_name("else")) {
        ++p_;
        n->args.push_back(expression());
      } else {
        n->args.push_back(nullptr);
      }
      return n;
    }
    return e;
  }
  bool at_end() const { return t_[p_].kind == Token::Kind::end; }
  bool is_name(const char* n) const { return t_[p_].kind == Token::Kind::name && t_[p_].text == n; }
  bool is_op(const char* o) const { return t_[p_].kind == Token::Kind::op && t_[p_].text == o; }
  std::string name() {
    if (t_[p_].kind != Token::Kind::name) throw syntax(line_, "expected a name, found '" + t_[p_].text + "'");
    return t_[p_++].text;
  }
  void expect(const char* o) {
    if (!is_op(o)) throw syntax(line_, std::string("expected '") + o + "', found '" + t_[p_].text + "'");
    ++p_;
  }
  void expect_end() {
    if (!at_end()) throw syntax(line_, "unexpected '" + t_[p_].text + "'");
  }
  void skip() { ++p_; }
  int line() const { return line_; }

 private:
  ExprPtr make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto n = make(Expr::Kind::binary);
    n->name = std::move(op);
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return n;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) { ++p_; e = binary("or", std::move(e), and_expr()); }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) { ++p_; e = binary("and", std::move(e), not_expr()); }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      ++p_;
      auto n = make(Expr::Kind::unary);
      n->name = "not";
      n->args.push_back(not_expr());
      return n;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = add();
    for (;;) {
      if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">=")) {
        std::string op = t_[p_++].text;
        e = binary(op, std::move(e), add());
      } else if (is_name("in")) {
        ++p_;
        e = binary("in", std::move(e), add());
      } else if (is_name("not") && t_[p_ + 1].kind == Token::Kind::name && t_[p_ + 1].text == "in") {
        p_ += 2;
        e = binary("not in", std::move(e), add());
      } else {
        return e;
      }
    }
  }
  ExprPtr add() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      std::string op = t_[p_++].text;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = mul();
    while (is_op("~")) { ++p_; e = binary("~", std::move(e), mul()); }
    return e;
  }
  ExprPtr mul() {
    ExprPtr e = unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = t_[p_++].text;
      e = binary(op, std::move(e), unary());
    }
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      auto n = make(Expr::Kind::unary);
      n->name = t_[p_++].text;
      n->args.push_back(unary());
      return n;
    }
    ExprPtr e = postfix(primary());
    for (;;) {
      if (is_op("|")) {
        ++p_;
        auto n = make(Expr::Kind::filter);
        n->name = name();
        n->args.push_back(std::move(e));
        if (is_op("(")) call_args(*n);
        e = postfix(std::move(n));
      } else if (is_name("is")) {
        ++p_;
        auto n = make(Expr::Kind::test);
        if (is_name("not")) { ++p_; n->negate = true; }
        n->name = name();
        n->args.push_back(std::move(e));
        if (is_op("(")) call_args(*n);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  void call_args(Expr& n) {
    expect("(");
    std::vector<ExprPtr> kw;
    while (!is_op(")")) {
      if (t_[p_].kind == Token::Kind::name && t_[p_ + 1].kind == Token::Kind::op && t_[p_ + 1].text == "=") {
        n.kwarg_names.push_back(t_[p_].text);
        p_ += 2;
        kw.push_back(expression());
      } else {
        if (!kw.empty()) throw syntax(line_, "positional argument after a keyword argument");
        n.args.push_back(expression());
      }
      if (!is_op(")")) expect(",");
    }
    ++p_;
    for (auto& k : kw) n.args.push_back(std::move(k));
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        ++p_;
        auto n = make(Expr::Kind::attr);
        n->name = name();
        n->args.push_back(std::move(e));
        e = std::move(n);
      } else if (is_op("[")) {
        ++p_;
        ExprPtr parts[3];
        int n_parts = 1;
        if (!is_op(":")) parts[0] = expression();
        while (is_op(":") && n_parts < 3) {
          ++p_;
          ++n_parts;
          if (!is_op(":") && !is_op("]")) parts[n_parts - 1] = expression();
        }
        expect("]");
        auto n = make(n_parts == 1 ? Expr::Kind::index : Expr::Kind::slice);
        n->args.push_back(std::move(e));
        for (int k = 0; k < (n_parts == 1 ? 1 : 3); ++k) n->args.push_back(std::move(parts[k]));
        if (n_parts == 1 && !n->args[1]) throw syntax(line_, "empty subscript");
        e = std::move(n);
      } else if (is_op("(")) {
        auto n = make(Expr::Kind::call);
        n->args.push_back(std::move(e));
        call_args(*n);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token& t = t_[p_];
    auto lit = [&](Value v) {
      ++p_;
      auto n = make(Expr::Kind::literal);
      n->value = std::move(v);
      return n;
    };
    switch (t.kind) {
      case Token::Kind::string: {
        std::string s = t.text;
        ++p_;
        while (t_[p_].kind == Token::Kind::string) s += t_[p_++].text;  // adjacent literals join
        auto n = make(Expr::Kind::literal);
        n->value = Value::string(std::move(s));
        return n;
      }
      case Token::Kind::integer: return lit(Value::integer(t.i));
      case Token::Kind::number: return lit(Value::number(t.d));
      case Token::Kind::name: {
        if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
        if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
        if (t.text == "none" || t.text == "None") return lit(Value::none());
        auto n = make(Expr::Kind::name);
        n->name = t.text;
        ++p_;
        return n;
      }
      case Token::Kind::op:
        if (t.text == "(") {
          ++p_;
          if (is_op(")")) {  // () is an empty tuple
            ++p_;
            return make(Expr::Kind::list);
          }
          ExprPtr e = expression();
          if (is_op(",")) {  // a tuple: read-only use makes it a list
            auto n = make(Expr::Kind::list);
            n->args.push_back(std::move(e));
            while (is_op(",")) {
              ++p_;
              if (is_op(")")) break;
              n->args.push_back(expression());
            }
            e = std::move(n);
          }
          expect(")");
          return e;
        }
        if (t.text == "[") {
          ++p_;
          auto n = make(Expr::Kind::list);
          while (!is_op("]")) {
            n->args.push_back(expression());
            if (!is_op("]")) expect(",");
          }
          ++p_;
          return n;
        }
        if (t.text == "{") {
          ++p_;
          auto n = make(Expr::Kind::dict);
          while (!is_op("}")) {
            n->keys.push_back(expression());
            expect(":");
            n->args.push_back(expression());
            if (!is_op("}")) expect(",");
          }
          ++p_;
          return n;
        }
        break;
      case Token::Kind::end: throw syntax(line_, "expression ends too early");
    }
    throw syntax(line_, "unexpected '" + t.text + "'");
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int line_;
};

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  Body parse_all() {
    std::string end;
    Body b = body({}, end);
    return b;
  }

 private:
  // Parses nodes until a statement whose keyword is in `ends`; that keyword goes to `ended`
  // and the parser for its remaining tokens stays in `last_`.
  Body body(const std::set<std::string>& ends, std::string& ended) {
    Body out;
    while (i_ < s_.size()) {
      Segment& seg = s_[i_++];
      Node n;
      n.line = seg.line;
      if (seg.kind == Segment::Kind::text) {
        n.kind = Node::Kind::text;
        n.text = std::move(seg.body);
        out.push_back(std::move(n));
        continue;
      }
      auto p = std::make_unique<ExprParser>(lex(seg.body, seg.line), seg.line);
      if (seg.kind == Segment::Kind::expr) {
        n.kind = Node::Kind::output;
        n.expr = p->expression();
        p->expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const std::string kw = p->name();
      if (ends.count(kw)) {
        ended = kw;
        last_ = std::move(p);
        return out;
      }
      if (kw == "if") {
        n.kind = Node::Kind::if_;
        ExprPtr cond = p->expression();
        p->expect_end();
        for (;;) {
          std::string e;
          Body b = body({"elif", "else", "endif"}, e);
          n.branches.emplace_back(std::move(cond), std::move(b));
          if (e.empty()) throw syntax(seg.line, "'if' without 'endif'");
          if (e == "endif") break;
          if (e == "elif") {
            cond = last_->expression();
            last_->expect_end();
          } else {
            cond = nullptr;
            last_->expect_end();
            std::string e2;
            Body eb = body({"endif"}, e2);
            if (e2.empty()) throw syntax(seg.line, "'if' without 'endif'");
            n.branches.emplace_back(nullptr, std::move(eb));
            break;
          }
        }
      } else if (kw == "for") {
        n.kind = Node::Kind::for_;
        n.loop_names.push_back(p->name());
        while (p->is_op(",")) {
          p->skip();
          n.loop_names.push_back(p->name());
        }
        if (!p->is_name("in")) throw syntax(seg.line, "expected 'in' in 'for'");
        p->skip();
        n.expr = p->expression();  // a trailing `if` would parse as a ternary without else:
        if (n.expr->kind == Expr::Kind::ternary && !n.expr->args[2]) {  // split it back out
          n.loop_filter = std::move(n.expr->args[1]);
          n.expr = std::move(n.expr->args[0]);
        }
        if (p->is_name("recursive")) throw unsupported(seg.line, "a recursive loop");
        p->expect_end();
        std::string e;
        n.body = body({"else", "endfor"}, e);
        if (e.empty()) throw syntax(seg.line, "'for' without 'endfor'");
        if (e == "else") {
          n.else_body = body({"endfor"}, e);
          if (e.empty()) throw syntax(seg.line, "'for' without 'endfor'");
        }
      } else if (kw == "set") {
        n.kind = Node::Kind::set;
        n.target = p->name();
        if (p->is_op(".")) {
          p->skip();
          n.attr = p->name();
        }
        if (p->is_op(",")) throw unsupported(seg.line, "a tuple assignment");
        if (!p->is_op("=")) throw unsupported(seg.line, "a block 'set'");
        p->skip();
        n.expr = p->expression();
        p->expect_end();
      } else if (kw == "macro") {
        n.kind = Node::Kind::macro;
        auto m = std::make_shared<MacroDef>();
        m->name = p->name();
        p->expect("(");
        while (!p->is_op(")")) {
          m->params.push_back(p->name());
          if (p->is_op("=")) {
            p->skip();
            m->defaults.push_back(p->expression());
          } else {
            m->defaults.push_back(nullptr);
          }
          if (!p->is_op(")")) p->expect(",");
        }
        p->skip();
        p->expect_end();
        std::string e;
        m->body = body({"endmacro"}, e);
        if (e.empty()) throw syntax(seg.line, "'macro' without 'endmacro'");
        n.macro = std::move(m);
      } else if (kw == "break" || kw == "continue") {  // jinja2.ext.loopcontrols, which HF enables
        p->expect_end();
        n.kind = kw == "break" ? Node::Kind::break_ : Node::Kind::continue_;
      } else if (kw == "generation" || kw == "endgeneration") {
        continue;  // HF's assistant-mask markers: no output of their own
      } else if (kw == "elif" || kw == "else" || kw == "endif" || kw == "endfor" || kw == "endmacro") {
        throw syntax(seg.line, "'" + kw + "' without its opening statement");
      } else {
        throw unsupported(seg.line, "the '" + kw + "' statement");
      }
      out.push_back(std::move(n));
    }
    return out;
  }

  std::vector<Segment> s_;
  size_t i_ = 0;
  std::unique_ptr<ExprParser> last_;
};

}  // namespace

Program parse(std::string_view source) {
  Parser p(split(source));
  return Program{p.parse_all()};
}

}  // namespace sluice::core::jinja
