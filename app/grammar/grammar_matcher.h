// Runs a Grammar (app/grammar/gbnf.h) over generated text and masks the tokens it cannot accept.
//
// Recognizer: llama.cpp's idea of a set of pushdown stacks. A stack is a chain of Nodes (an
// element position and the node below it), kept in one arena; its top is always a character
// element (a rule reference is expanded into one stack per alternative when it reaches the top,
// and a finished sequence pops), and the empty stack (-1) means the text so far is a whole
// match. Feeding a code point keeps the stacks whose top matches it, each moved one element on.
// Text arrives as bytes: a partial UTF-8 character is carried, and a stack survives it when its
// top may match one of the character's completions.
//
// Mask: GrammarVocab holds the vocabulary's token texts (built once per model and shared by
// every request), sorted, with each token's common prefix with the one before. compute_mask()
// walks that list as a trie: the stack set after each prefix byte is kept per depth, so a token
// re-walks only the bytes past the prefix it shares with the previous token, and every token
// below a prefix that the grammar rejects is skipped without a walk. End-of-generation tokens
// are allowed only where the grammar can end; tokens that render as no text (control tokens)
// only where a stack waits for that very token (a `<[id]>` element).
//
// Memory: the arena, the per-depth sets and the mask are per matcher, reserved at reset() and
// reused across requests (the scheduler keeps one matcher per slot); accept() compacts the live
// stacks into a second arena, so the arena does not grow with the length of the reply.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "app/grammar/gbnf.h"

namespace sluice::core {

class Tokenizer;

class GrammarVocab {
 public:
  explicit GrammarVocab(const Tokenizer& tokenizer);

  int32_t n_vocab() const { return n_vocab_; }
  std::string_view piece(int32_t id) const {
    return std::string_view(bytes_).substr(offset_[static_cast<size_t>(id)], offset_[static_cast<size_t>(id) + 1] - offset_[static_cast<size_t>(id)]);
  }
  bool is_end(int32_t id) const { return is_end_[static_cast<size_t>(id)] != 0; }
  std::span<const int32_t> order() const { return order_; }
  std::span<const uint32_t> common_prefix() const { return lcp_; }
  std::span<const int32_t> end_tokens() const { return end_tokens_; }
  size_t max_piece() const { return max_piece_; }

 private:
  int32_t n_vocab_ = 0;
  std::string bytes_;              // every token's text (special = false), back to back
  std::vector<uint32_t> offset_;   // [n_vocab + 1]
  std::vector<uint8_t> is_end_;    // end-of-generation ids
  std::vector<int32_t> order_;     // ids with text, not end tokens, sorted by text
  std::vector<uint32_t> lcp_;      // lcp_[k]: bytes order_[k] shares with order_[k - 1] (0 for k = 0)
  std::vector<int32_t> end_tokens_;
  size_t max_piece_ = 0;
};

class GrammarMatcher {
 public:
  // Starts a match of `grammar` at its root; the vocabulary is needed by compute_mask/accept only.
  void reset(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab = nullptr);
  bool active() const { return grammar_ != nullptr; }
  void clear() {
    grammar_.reset();
    vocab_.reset();
  }

  // Feeds bytes; false (and the state unchanged) when the grammar rejects them.
  bool accept_text(std::string_view bytes);
  // Feeds a sampled token: a stack waiting for that token by id (<[id]>) takes it; otherwise its
  // text (nothing for an end token). Error(internal) when rejected.
  void accept(int32_t token);
  // The text so far is a whole match (no partial character pending).
  bool can_end() const;

  // 1 for every token the grammar accepts next, 0 for the rest; returns how many are allowed.
  size_t compute_mask();
  std::span<const uint8_t> mask() const { return mask_; }

 private:
  struct Node {
    uint32_t pos;    // element index: the next element this stack must match
    int32_t parent;  // the node below, -1 at the bottom
  };
  struct Utf8 {
    uint32_t value = 0;
    uint32_t left = 0;  // continuation bytes still to come
    uint32_t min = 0;   // the least code point of this length (a smaller one is overlong, invalid)
  };
  int32_t push_node(uint32_t pos, int32_t parent);
  bool same_stack(int32_t a, int32_t b) const;
  void add_stack(int32_t s, size_t set_begin);
  void expand(int32_t s, size_t set_begin);
  // Level d + 1 of the walk from level d and one byte; false when it is empty.
  bool step(size_t d, unsigned char byte);
  int32_t copy_stack(int32_t s, std::vector<Node>& to);
  // Moves the stacks waiting for `token` by id past it; false (state unchanged) when none waits.
  bool accept_token_element(int32_t token);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const GrammarVocab> vocab_;
  std::vector<int32_t> current_;  // the stacks after the text so far
  Utf8 utf8_;                     // its pending partial character
  std::vector<Node> nodes_, spare_;
  size_t live_nodes_ = 0;  // nodes_[0, live_nodes_) belong to current_
  // The walk: level d's stacks are stacks_[level_begin_[d], level_begin_[d + 1]).
  std::vector<int32_t> stacks_;
  std::vector<uint32_t> level_begin_, level_nodes_;
  std::vector<Utf8> level_utf8_;
  std::vector<int32_t> chain_;
  std::vector<uint8_t> mask_;
};

}  // namespace sluice::core
