// SentencePiece BPE as llama.cpp runs it (llm_tokenizer_spm_session): start from one symbol per
// UTF-8 character, repeatedly merge the adjacent pair whose concatenation is the token with the
// highest score (ties: leftmost), then emit each symbol's token or, failing that, its bytes.
#include <queue>

#include "core/text/tokenizer_impl.h"
#include "core/text/unicode_utf8.h"

namespace sluice::core {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t n;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

// priority_queue keeps the "largest" on top: highest score, then smallest left index.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void spm_tokenize(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& out) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(utf8::sequence_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + len == text.size() ? -1 : index + 1, offset, len});
    offset += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = impl.find(text.substr(symbols[left].start, size));
    if (id == kNullToken) return;
    queue.push({left, right, impl.scores[id], size});
  };

  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side was merged away or grew since this pair was queued.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].start, symbols[i].n);
    const int32_t id = impl.find(piece);
    if (id != kNullToken) {
      out.push_back(id);
      continue;
    }
    // Every merged symbol is a token, so only a single character that is not one gets here.
    for (char c : piece) {
      const int32_t byte_id = impl.byte_tokens[static_cast<uint8_t>(c)];
      // llama.cpp aborts when a vocabulary lacks a byte token; <unk> is the graceful stand-in.
      if (byte_id != kNullToken) {
        out.push_back(byte_id);
      } else if (impl.unk != kNullToken) {
        out.push_back(impl.unk);
      }
    }
  }
}

}  // namespace sluice::core
