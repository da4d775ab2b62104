// Internal state of a Tokenizer and the per-model algorithms; not part of the public API.
//
// Token texts live in `texts`; `index` maps text -> id through string_views into those strings,
// so `texts` must never change after the index is built (an Impl is built once, then shared
// read-only). Merge ranks are keyed by the merge line itself, "left right", and looked up with
// a string_view (heterogeneous lookup) so that encoding allocates no key strings.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/pretokenizer.h"
#include "core/tokenizer.h"

namespace sluice::core {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Tokenizer::Impl {
  TokenizerModel model = TokenizerModel::spm;
  std::optional<PreTokenizer> pre;  // byte-level BPE only

  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<uint32_t> attrs;  // token_attr bits
  std::unordered_map<std::string_view, int32_t> index;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> merge_ranks;

  int32_t bos = kNullToken, eos = kNullToken, eot = kNullToken, eom = kNullToken;
  int32_t unk = kNullToken, sep = kNullToken, pad = kNullToken, mask = kNullToken;
  int32_t fim_pre = kNullToken, fim_suf = kNullToken, fim_mid = kNullToken;
  int32_t fim_pad = kNullToken, fim_rep = kNullToken, fim_sep = kNullToken;

  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;
  bool add_space_prefix = false;
  bool clean_spaces = false;
  bool ignore_merges = false;

  // Control, user-defined and unknown tokens, longest text first: the order in which the
  // special-token partition looks for them (llama.cpp's cache_special_tokens).
  std::vector<int32_t> special_tokens;
  std::unordered_set<int32_t> eog;
  // SentencePiece byte fallback: the token for each byte ("<0xXX>", else the 1-byte text).
  std::array<int32_t, 256> byte_tokens{};

  int32_t find(std::string_view text) const {
    const auto it = index.find(text);
    return it == index.end() ? kNullToken : it->second;
  }
  int32_t n_tokens() const { return static_cast<int32_t>(texts.size()); }
};

// Appends the tokens of one stretch of plain text (no special tokens in it).
// `text` for SentencePiece is already space-escaped ('▁') and prefixed as llama.cpp does.
void spm_tokenize(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& out);
void bpe_tokenize(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& out);

}  // namespace sluice::core
