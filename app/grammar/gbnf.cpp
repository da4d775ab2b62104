#include "app/grammar/gbnf.h"

#include <functional>
#include <map>

#include "common/error.h"

namespace sluice::core {

namespace {

constexpr uint32_t kMaxRepeat = 4096;  // {m,n} bound: each repeat becomes elements or a rule
constexpr size_t kMaxRules = 1 << 16;

// An element while parsing: ranges inline, flattened at the end.
struct Item {
  GrammarElementKind kind;
  uint32_t rule = 0;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
};
using Sequence = std::vector<Item>;
using Alternatives = std::vector<Sequence>;

Item ref(uint32_t rule) { return {GrammarElementKind::rule_ref, rule, {}}; }

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Grammar parse() {
    skip_space(true);
    while (i_ < s_.size()) {
      const std::string name = parse_name();
      skip_space(false);
      if (s_.substr(i_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      skip_space(true);
      const uint32_t id = rule_id(name);
      if (defined_[id]) fail("rule '" + name + "' is defined twice");
      defined_[id] = true;
      rules_[id] = parse_alternatives(name, false);
      skip_space(false);
      if (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') fail("unexpected '" + std::string(1, s_[i_]) + "'");
      skip_space(true);
    }
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) throw Error(ErrorCode::invalid_argument, "grammar: rule '" + names_[r] + "' is used but not defined");
    const auto root = ids_.find("root");
    if (root == ids_.end()) throw Error(ErrorCode::invalid_argument, "grammar: no 'root' rule");
    check_left_recursion();
    return flatten(root->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) line += s_[k] == '\n';
    throw Error(ErrorCode::invalid_argument, "grammar: " + what + " (line " + std::to_string(line) + ")");
  }

  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }

  void skip_space(bool newline_ok) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  std::string parse_name() {
    const size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (b == i_) fail(i_ < s_.size() ? "expected a rule name, found '" + std::string(1, s_[i_]) + "'" : "expected a rule name");
    return std::string(s_.substr(b, i_ - b));
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, added] = ids_.try_emplace(name, static_cast<uint32_t>(rules_.size()));
    if (added) add_rule(name);
    return it->second;
  }

  uint32_t add_rule(const std::string& name) {
    if (rules_.size() >= kMaxRules) fail("more than 65536 rules");
    rules_.emplace_back();
    names_.push_back(name);
    defined_.push_back(false);
    return static_cast<uint32_t>(rules_.size() - 1);
  }

  uint32_t generated_rule(const std::string& base, Alternatives alts) {
    const uint32_t id = add_rule(base + "_" + std::to_string(rules_.size()));
    defined_[id] = true;
    rules_[id] = std::move(alts);
    return id;
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k, ++i_) {
      if (i_ >= s_.size()) fail("unfinished escape");
      const char c = s_[i_];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit '" + std::string(1, c) + "' in escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  uint32_t parse_char() {
    if (i_ >= s_.size()) fail("unfinished literal or class");
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      ++i_;
      if (i_ >= s_.size()) fail("unfinished escape");
      const char e = s_[i_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '/': return static_cast<uint32_t>(e);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: --i_; fail("unknown escape '\\" + std::string(1, e) + "'");
      }
    }
    const int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i_ + static_cast<size_t>(len) > s_.size()) fail("invalid UTF-8 in the grammar");
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
      v = v << 6 | (b & 0x3F);
    }
    i_ += static_cast<size_t>(len);
    return v;
  }

  uint32_t parse_count() {
    const size_t b = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && v <= kMaxRepeat) v = v * 10 + static_cast<uint64_t>(s_[i_++] - '0');
    if (b == i_) fail("expected a number in '{m,n}'");
    if (v > kMaxRepeat) fail("repetition count above 4096");
    return static_cast<uint32_t>(v);
  }

  // A primary item: one or more Items (a literal is one per character).
  Sequence parse_primary(const std::string& rule_name) {
    Sequence out;
    if (at('"')) {
      ++i_;
      while (!at('"')) {
        const uint32_t c = parse_char();
        out.push_back({GrammarElementKind::chars, 0, {{c, c}}});
      }
      ++i_;
      if (out.empty()) out.push_back(ref(generated_rule(rule_name, {Sequence{}})));  // "" matches empty
    } else if (at('[')) {
      ++i_;
      Item it{GrammarElementKind::chars, 0, {}};
      if (at('^')) {
        it.kind = GrammarElementKind::chars_not;
        ++i_;
      }
      while (!at(']')) {
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
          ++i_;
          hi = parse_char();
          if (hi < lo) fail("character range is reversed");
        }
        it.ranges.emplace_back(lo, hi);
      }
      ++i_;
      out.push_back(std::move(it));
    } else if (s_.substr(i_, 2) == "<[") {
      i_ += 2;
      const size_t b = i_;
      uint64_t id = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && id <= INT32_MAX) id = id * 10 + static_cast<uint64_t>(s_[i_++] - '0');
      if (b == i_ || id > INT32_MAX) fail("expected a token id in '<[id]>'");
      if (s_.substr(i_, 2) != "]>") fail("expected ']>' after the token id");
      i_ += 2;
      out.push_back({GrammarElementKind::token, static_cast<uint32_t>(id), {}});
    } else if (at('.')) {
      ++i_;
      out.push_back({GrammarElementKind::chars_not, 0, {}});  // no excluded range: any character
    } else if (at('(')) {
      ++i_;
      skip_space(true);
      Alternatives alts = parse_alternatives(rule_name, true);
      skip_space(true);
      if (!at(')')) fail("expected ')'");
      ++i_;
      out.push_back(ref(generated_rule(rule_name, std::move(alts))));
    } else {
      out.push_back(ref(rule_id(parse_name())));
    }
    return out;
  }

  // Applies a postfix operator to `x`, appending the result to `seq`.
  void repeat(const std::string& rule_name, Sequence x, Sequence& seq) {
    if (!at('*') && !at('+') && !at('?') && !at('{')) {
      for (Item& it : x) seq.push_back(std::move(it));
      return;
    }
    if (x.size() > 1) x = {ref(generated_rule(rule_name, {std::move(x)}))};
    const Item item = x[0];
    uint32_t min = 0, max = UINT32_MAX;  // UINT32_MAX: unbounded
    const char op = s_[i_++];
    if (op == '+') min = 1;
    else if (op == '?') max = 1;
    else if (op == '{') {
      skip_space(false);
      min = max = parse_count();
      skip_space(false);
      if (at(',')) {
        ++i_;
        skip_space(false);
        max = at('}') ? UINT32_MAX : parse_count();
        skip_space(false);
      }
      if (!at('}')) fail("expected '}'");
      ++i_;
      if (max < min) fail("repetition {m,n} has n < m");
    }
    for (uint32_t k = 0; k < min; ++k) seq.push_back(item);
    if (max == UINT32_MAX) {
      const uint32_t star = add_rule(rule_name + "_" + std::to_string(rules_.size()));
      defined_[star] = true;
      rules_[star] = {Sequence{item, ref(star)}, Sequence{}};
      seq.push_back(ref(star));
    } else if (max > min) {
      // opt_1 ::= item | empty; opt_k ::= item opt_{k-1} | empty
      uint32_t opt = generated_rule(rule_name, {Sequence{item}, Sequence{}});
      for (uint32_t k = min + 1; k < max; ++k) opt = generated_rule(rule_name, {Sequence{item, ref(opt)}, Sequence{}});
      seq.push_back(ref(opt));
    }
  }

  Sequence parse_sequence(const std::string& rule_name, bool nested) {
    Sequence seq;
    for (;;) {
      skip_space(nested);
      if (i_ >= s_.size() || at('|') || at(')') || at('\n') || at('\r')) break;
      Sequence x = parse_primary(rule_name);
      repeat(rule_name, std::move(x), seq);
    }
    return seq;
  }

  Alternatives parse_alternatives(const std::string& rule_name, bool nested) {
    Alternatives alts;
    alts.push_back(parse_sequence(rule_name, nested));
    while (at('|')) {
      ++i_;
      skip_space(true);
      alts.push_back(parse_sequence(rule_name, nested));
    }
    return alts;
  }

  void check_left_recursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          bool all = true;
          for (const Item& it : alt) all = all && it.kind == GrammarElementKind::rule_ref && nullable[it.rule];
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // Edges to the rules an alternative can start with; a cycle is left recursion.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (const Sequence& alt : rules_[r])
        for (const Item& it : alt) {
          if (it.kind != GrammarElementKind::rule_ref) break;
          first[r].push_back(it.rule);
          if (!nullable[it.rule]) break;
        }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::function<void(uint32_t)> visit = [&](uint32_t r) {
      color[r] = 1;
      for (uint32_t next : first[r]) {
        if (color[next] == 1)
          throw Error(ErrorCode::invalid_argument, "grammar: rule '" + names_[next] +
                                                       "' is left-recursive (it can reach itself before matching a character)");
        if (color[next] == 0) visit(next);
      }
      color[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r)
      if (color[r] == 0) visit(r);
  }

  Grammar flatten(uint32_t root) const {
    Grammar g;
    g.root = root;
    g.rule_names = names_;
    g.rules.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Sequence& alt : rules_[r]) {
        g.rules[r].push_back(static_cast<uint32_t>(g.elements.size()));
        for (const Item& it : alt) {
          GrammarElement e{it.kind, it.rule, 0};
          if (it.kind == GrammarElementKind::chars || it.kind == GrammarElementKind::chars_not) {
            e.value = static_cast<uint32_t>(g.ranges.size());
            e.count = static_cast<uint32_t>(it.ranges.size());
            g.ranges.insert(g.ranges.end(), it.ranges.begin(), it.ranges.end());
          }
          g.elements.push_back(e);
        }
        g.elements.push_back({GrammarElementKind::end, 0, 0});
      }
    return g;
  }

  std::string_view s_;
  size_t i_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<Alternatives> rules_;
};

}  // namespace

bool Grammar::matches(const GrammarElement& e, uint32_t c) const {
  if (e.kind == GrammarElementKind::token) return false;
  bool in = false;
  for (uint32_t k = 0; k < e.count && !in; ++k) in = ranges[e.value + k].first <= c && c <= ranges[e.value + k].second;
  return e.kind == GrammarElementKind::chars ? in : !in;
}

bool Grammar::may_match(const GrammarElement& e, uint32_t lo, uint32_t hi) const {
  if (e.kind == GrammarElementKind::token) return false;
  for (uint32_t k = 0; k < e.count; ++k) {
    const auto [a, b] = ranges[e.value + k];
    if (e.kind == GrammarElementKind::chars && a <= hi && lo <= b) return true;
    if (e.kind == GrammarElementKind::chars_not && a <= lo && hi <= b) return false;  // all excluded
  }
  return e.kind == GrammarElementKind::chars_not;
}

Grammar parse_gbnf(std::string_view text) { return Parser(text).parse(); }

std::string gbnf_literal(std::string_view text) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') out += {'\\', ch};
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    else out += ch;
  }
  return out + "\"";
}

}  // namespace sluice::core
