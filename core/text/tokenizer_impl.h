// Internal state of a Tokenizer and the per-model algorithms; not part of the public API.
//
// Token texts live in a StringTable whose entry i is token i; merge ranks in another, keyed by
// the merge line itself, "left right". An Impl is built once, then shared read-only.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/text/pretokenizer.h"
#include "core/gguf/string_table.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

struct Tokenizer::Impl {
  TokenizerModel model = TokenizerModel::spm;
  std::optional<PreTokenizer> pre;  // byte-level BPE only

  StringTable vocab;  // entry i: text of token i, value i
  std::vector<float> scores;
  std::vector<uint32_t> attrs;  // token_attr bits
  StringTable merge_ranks;      // "left right" -> rank

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

  int32_t find(std::string_view text) const { return vocab.find(text); }
  std::string_view text(int32_t id) const { return vocab.view(static_cast<size_t>(id)); }
  int32_t n_tokens() const { return static_cast<int32_t>(vocab.size()); }
};

// Appends the tokens of one stretch of plain text (no special tokens in it).
// `text` for SentencePiece is already space-escaped ('▁') and prefixed as llama.cpp does.
void spm_tokenize(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& out);
void bpe_tokenize(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& out);

}  // namespace sluice::core
