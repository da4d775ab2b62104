// Byte-level BPE as llama.cpp runs it (llm_tokenizer_bpe_session): pre-tokenize, map each word's
// bytes to GPT-2's alphabet, start from one symbol per alphabet character, repeatedly merge the
// adjacent pair with the lowest merge rank (ties: leftmost), then emit each symbol's token or,
// failing that, the tokens of its single bytes that exist.
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
  int32_t rank;
  size_t size;
};

// priority_queue keeps the "largest" on top: lowest rank, then smallest left index.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

void merge_word(const Tokenizer::Impl& impl, std::string_view word, std::vector<int32_t>& out) {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t offset = 0; offset < word.size();) {
    const size_t len = std::min(utf8::sequence_length(static_cast<uint8_t>(word[offset])), word.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + len == word.size() ? -1 : index + 1, offset, len});
    offset += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  std::string key;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    key.assign(word.substr(l.start, l.n));
    key.push_back(' ');
    key.append(word.substr(r.start, r.n));
    const int32_t rank = impl.merge_ranks.find(key);
    if (rank == StringTable::kAbsent) return;
    queue.push({left, right, rank, l.n + r.n});
  };

  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side was merged away or grew since this pair was queued. Symbols only grow and
    // stay contiguous, so equal sizes mean equal text.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = word.substr(symbols[i].start, symbols[i].n);
    const int32_t id = impl.find(piece);
    if (id != kNullToken) {
      out.push_back(id);
      continue;
    }
    // llama.cpp looks up each byte of the encoded text on its own and drops the misses.
    for (char c : piece) {
      const int32_t byte_id = impl.find(std::string_view(&c, 1));
      if (byte_id != kNullToken) out.push_back(byte_id);
    }
  }
}

}  // namespace

void bpe_tokenize(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& out) {
  std::string encoded;
  for (const std::string& word : impl.pre->split(text)) {
    encoded.clear();
    for (char c : word) encoded.append(utf8::byte_to_symbol(static_cast<uint8_t>(c)));
    if (impl.ignore_merges) {
      const int32_t id = impl.find(encoded);
      if (id != kNullToken) {
        out.push_back(id);
        continue;
      }
    }
    merge_word(impl, encoded, out);
  }
}

}  // namespace sluice::core
