#include "app/grammar/grammar_matcher.h"

#include <algorithm>

#include "common/error.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

namespace {

constexpr size_t kReserveNodes = 1 << 15;
constexpr size_t kReserveStacks = 1 << 12;

}  // namespace

GrammarVocab::GrammarVocab(const Tokenizer& tokenizer) : n_vocab_(tokenizer.n_vocab()) {
  const auto n = static_cast<size_t>(n_vocab_);
  offset_.resize(n + 1);
  is_end_.resize(n);
  for (int32_t id = 0; id < n_vocab_; ++id) {
    offset_[static_cast<size_t>(id)] = static_cast<uint32_t>(bytes_.size());
    const std::string p = tokenizer.token_to_piece(id, false);
    bytes_ += p;
    max_piece_ = std::max(max_piece_, p.size());
    if (tokenizer.is_eog(id)) {
      is_end_[static_cast<size_t>(id)] = 1;
      end_tokens_.push_back(id);
    } else if (!p.empty()) {
      order_.push_back(id);
    }
  }
  offset_[n] = static_cast<uint32_t>(bytes_.size());
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    const std::string_view pa = piece(a), pb = piece(b);
    return pa != pb ? pa < pb : a < b;
  });
  lcp_.resize(order_.size());
  for (size_t k = 1; k < order_.size(); ++k) {
    const std::string_view a = piece(order_[k - 1]), b = piece(order_[k]);
    const auto mm = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    lcp_[k] = static_cast<uint32_t>(mm.first - a.begin());
  }
}

void GrammarMatcher::reset(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab) {
  grammar_ = std::move(grammar);
  vocab_ = std::move(vocab);
  nodes_.clear();
  nodes_.reserve(kReserveNodes);
  spare_.reserve(kReserveNodes);
  stacks_.clear();
  stacks_.reserve(kReserveStacks);
  current_.reserve(kReserveStacks);
  const size_t depth = (vocab_ ? vocab_->max_piece() : 0) + 2;
  level_begin_.resize(std::max(level_begin_.size(), depth + 1));
  level_nodes_.resize(std::max(level_nodes_.size(), depth));
  level_utf8_.resize(std::max(level_utf8_.size(), depth));
  if (vocab_) mask_.assign(static_cast<size_t>(vocab_->n_vocab()), 0);
  utf8_ = {};
  // The root's alternatives, expanded: the start state.
  for (uint32_t alt : grammar_->rules[grammar_->root]) {
    if (grammar_->elements[alt].kind == GrammarElementKind::end) add_stack(-1, 0);
    else expand(push_node(alt, -1), 0);
  }
  current_.assign(stacks_.begin(), stacks_.end());
  stacks_.clear();
  live_nodes_ = nodes_.size();
}

int32_t GrammarMatcher::push_node(uint32_t pos, int32_t parent) {
  nodes_.push_back({pos, parent});
  return static_cast<int32_t>(nodes_.size() - 1);
}

bool GrammarMatcher::same_stack(int32_t a, int32_t b) const {
  while (a != b) {
    if (a < 0 || b < 0) return false;
    const Node& x = nodes_[static_cast<size_t>(a)];
    const Node& y = nodes_[static_cast<size_t>(b)];
    if (x.pos != y.pos) return false;
    a = x.parent;
    b = y.parent;
  }
  return true;
}

void GrammarMatcher::add_stack(int32_t s, size_t set_begin) {
  for (size_t k = set_begin; k < stacks_.size(); ++k)
    if (same_stack(stacks_[k], s)) return;
  stacks_.push_back(s);
}

// Brings a stack to a character element on top (or to the empty stack), appending the result(s)
// to the set that begins at set_begin.
void GrammarMatcher::expand(int32_t s, size_t set_begin) {
  if (s < 0) return add_stack(-1, set_begin);
  const Node n = nodes_[static_cast<size_t>(s)];
  const GrammarElement& e = grammar_->elements[n.pos];
  if (e.kind != GrammarElementKind::rule_ref) return add_stack(s, set_begin);
  // What follows the reference in its sequence, or (at the sequence's end) the stack below.
  const int32_t cont = grammar_->elements[n.pos + 1].kind == GrammarElementKind::end ? n.parent : push_node(n.pos + 1, n.parent);
  for (uint32_t alt : grammar_->rules[e.value]) {
    if (grammar_->elements[alt].kind == GrammarElementKind::end) expand(cont, set_begin);
    else expand(push_node(alt, cont), set_begin);
  }
}

bool GrammarMatcher::step(size_t d, unsigned char b) {
  Utf8 u = level_utf8_[d];
  bool whole = false;
  uint32_t cp = 0;
  constexpr uint32_t kInvalid = 99;
  if (u.left == 0) {
    if (b < 0x80) whole = true, cp = b;
    else if ((b & 0xE0) == 0xC0) u = {b & 0x1Fu, 1, 0x80};
    else if ((b & 0xF0) == 0xE0) u = {b & 0x0Fu, 2, 0x800};
    else if ((b & 0xF8) == 0xF0) u = {b & 0x07u, 3, 0x10000};
    else u = {0, kInvalid, 0};  // not a lead byte: nothing matches
  } else if ((b & 0xC0) != 0x80) {
    u = {0, kInvalid, 0};
  } else {
    u.value = u.value << 6 | (b & 0x3Fu);
    if (--u.left == 0) {
      whole = true;
      cp = u.value;
      // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not text.
      u = cp < u.min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF ? Utf8{0, kInvalid, 0} : Utf8{};
    }
  }
  level_utf8_[d + 1] = u;
  const size_t from = level_begin_[d], to = level_begin_[d + 1];
  const size_t out = stacks_.size();
  if (u.left == kInvalid) return false;
  for (size_t k = from; k < to; ++k) {
    const int32_t s = stacks_[k];
    if (s < 0) continue;  // a whole match takes no more text
    const Node n = nodes_[static_cast<size_t>(s)];
    const GrammarElement& e = grammar_->elements[n.pos];
    if (whole) {
      if (!grammar_->matches(e, cp)) continue;
      expand(grammar_->elements[n.pos + 1].kind == GrammarElementKind::end ? n.parent : push_node(n.pos + 1, n.parent), out);
    } else {
      // The code points this prefix can still complete to, valid ones only.
      const uint32_t shift = 6 * u.left;
      const uint32_t lo = std::max(u.value << shift, u.min), hi = std::min((u.value << shift) | ((1u << shift) - 1), 0x10FFFFu);
      if (lo <= hi && grammar_->may_match(e, lo, hi)) stacks_.push_back(s);
    }
  }
  return stacks_.size() > out;
}

int32_t GrammarMatcher::copy_stack(int32_t s, std::vector<Node>& to) {
  chain_.clear();
  for (; s >= 0; s = nodes_[static_cast<size_t>(s)].parent) chain_.push_back(s);
  int32_t below = -1;
  for (size_t k = chain_.size(); k-- > 0;) {
    to.push_back({nodes_[static_cast<size_t>(chain_[k])].pos, below});
    below = static_cast<int32_t>(to.size() - 1);
  }
  return below;
}

bool GrammarMatcher::accept_text(std::string_view text) {
  if (!grammar_) throw Error(ErrorCode::internal, "grammar matcher used before reset");
  if (level_begin_.size() < text.size() + 2) {  // accept() never needs this: pieces fit max_piece
    level_begin_.resize(text.size() + 2);
    level_nodes_.resize(text.size() + 2);
    level_utf8_.resize(text.size() + 2);
  }
  stacks_.assign(current_.begin(), current_.end());
  level_begin_[0] = 0;
  level_begin_[1] = static_cast<uint32_t>(stacks_.size());
  level_utf8_[0] = utf8_;
  for (size_t d = 0; d < text.size(); ++d) {
    const bool alive = step(d, static_cast<unsigned char>(text[d]));
    level_begin_[d + 2] = static_cast<uint32_t>(stacks_.size());
    if (!alive) {
      stacks_.clear();
      nodes_.resize(live_nodes_);
      return false;
    }
  }
  // Keep the last level's stacks, compacted into the spare arena.
  const size_t last = text.size();
  spare_.clear();
  current_.clear();
  for (size_t k = level_begin_[last]; k < level_begin_[last + 1]; ++k) current_.push_back(copy_stack(stacks_[k], spare_));
  nodes_.swap(spare_);
  live_nodes_ = nodes_.size();
  utf8_ = level_utf8_[last];
  stacks_.clear();
  return true;
}

bool GrammarMatcher::accept_token_element(int32_t token) {
  if (utf8_.left != 0) return false;
  stacks_.clear();
  for (const int32_t s : current_) {
    if (s < 0) continue;
    const Node n = nodes_[static_cast<size_t>(s)];
    const GrammarElement& e = grammar_->elements[n.pos];
    if (e.kind != GrammarElementKind::token || e.value != static_cast<uint32_t>(token)) continue;
    expand(grammar_->elements[n.pos + 1].kind == GrammarElementKind::end ? n.parent : push_node(n.pos + 1, n.parent), 0);
  }
  if (stacks_.empty()) {
    nodes_.resize(live_nodes_);
    return false;
  }
  spare_.clear();
  current_.clear();
  for (const int32_t s : stacks_) current_.push_back(copy_stack(s, spare_));
  nodes_.swap(spare_);
  live_nodes_ = nodes_.size();
  stacks_.clear();
  return true;
}

void GrammarMatcher::accept(int32_t token) {
  if (!vocab_ || token < 0 || token >= vocab_->n_vocab()) throw Error(ErrorCode::internal, "grammar: token outside the vocabulary");
  if (accept_token_element(token)) return;
  if (vocab_->is_end(token)) return;
  if (vocab_->piece(token).empty())  // a control token that no <[id]> waits for
    throw Error(ErrorCode::internal, "grammar: sampled token " + std::to_string(token) + " does not match the grammar");
  if (!accept_text(vocab_->piece(token)))
    throw Error(ErrorCode::internal, "grammar: sampled token " + std::to_string(token) + " does not match the grammar");
}

bool GrammarMatcher::can_end() const {
  return utf8_.left == 0 && std::find(current_.begin(), current_.end(), -1) != current_.end();
}

size_t GrammarMatcher::compute_mask() {
  if (!grammar_ || !vocab_) throw Error(ErrorCode::internal, "grammar mask without a vocabulary");
  std::fill(mask_.begin(), mask_.end(), uint8_t{0});
  size_t allowed = 0;
  stacks_.assign(current_.begin(), current_.end());
  level_begin_[0] = 0;
  level_begin_[1] = static_cast<uint32_t>(stacks_.size());
  level_nodes_[0] = static_cast<uint32_t>(nodes_.size());
  level_utf8_[0] = utf8_;
  size_t h = 0;  // levels 0..h are computed for the previous token's prefix
  const std::span<const int32_t> order = vocab_->order();
  const std::span<const uint32_t> lcp = vocab_->common_prefix();
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string_view p = vocab_->piece(order[k]);
    if (k > 0 && lcp[k] >= h && level_begin_[h + 1] == level_begin_[h]) continue;  // below a rejected prefix
    size_t d = std::min<size_t>(k > 0 ? lcp[k] : 0, h);
    stacks_.resize(level_begin_[d + 1]);
    nodes_.resize(level_nodes_[d]);
    for (; d < p.size(); ++d) {
      const bool alive = step(d, static_cast<unsigned char>(p[d]));
      level_begin_[d + 2] = static_cast<uint32_t>(stacks_.size());
      level_nodes_[d + 1] = static_cast<uint32_t>(nodes_.size());
      if (!alive) {
        ++d;
        break;
      }
    }
    h = d;
    if (h == p.size() && level_begin_[h + 1] > level_begin_[h]) {
      mask_[static_cast<size_t>(order[k])] = 1;
      ++allowed;
    }
  }
  stacks_.clear();
  nodes_.resize(live_nodes_);
  // Tokens the grammar names by id (<[id]>), control tokens included, where a stack waits for one.
  if (utf8_.left == 0)
    for (const int32_t s : current_) {
      if (s < 0) continue;
      const GrammarElement& e = grammar_->elements[nodes_[static_cast<size_t>(s)].pos];
      if (e.kind != GrammarElementKind::token || e.value >= static_cast<uint32_t>(vocab_->n_vocab()) || mask_[e.value]) continue;
      mask_[e.value] = 1;
      ++allowed;
    }
  if (can_end())
    for (int32_t id : vocab_->end_tokens()) {
      if (mask_[static_cast<size_t>(id)]) continue;
      mask_[static_cast<size_t>(id)] = 1;
      ++allowed;
    }
  return allowed;
}

}  // namespace sluice::core
