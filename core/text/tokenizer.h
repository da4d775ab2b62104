// Tokenizer: text <-> token ids, reproducing llama.cpp's llama_tokenize / llama_token_to_piece /
// llama_detokenize for the vocabularies sluice runs.
//
// Two models, chosen by GGUF `tokenizer.ggml.model`:
//   - "llama": SentencePiece BPE. Spaces become U+2581 '▁', a space is prefixed to the text
//     (and after every special token) when add_space_prefix, adjacent pieces merge best score
//     first, and a piece that is not a token falls back to byte tokens <0xXX>.
//   - "gpt2": byte-level BPE. A pre-tokenizer (`tokenizer.ggml.pre`, see pretokenizer.h) cuts the
//     text into words, each byte of a word is mapped to GPT-2's printable alphabet, and merges
//     apply lowest rank first (`tokenizer.ggml.merges`, rank = index).
// Anything else is Error(unsupported) naming the value.
//
// Special tokens (token_type CONTROL, USER_DEFINED or UNKNOWN) are cut out of the text first,
// longest text first. With parse_special = false only USER_DEFINED tokens are cut out, as in
// llama.cpp; control tokens are then tokenized as ordinary text. With add_special, BOS is
// prepended when add_bos and EOS appended when add_eos (GGUF add_bos_token / add_eos_token, with
// llama.cpp's defaults: true/false for SentencePiece, per pre-tokenizer for byte-level BPE).
//
// Token ids are int32 (llama_token); kNullToken (-1) means "none". A Tokenizer is immutable
// after construction and cheap to copy (shared state); every method is safe to call from
// several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::core {

class GgufFile;

inline constexpr int32_t kNullToken = -1;

// llama.cpp's llama_token_attr bits.
namespace token_attr {
inline constexpr uint32_t kUndefined = 0;
inline constexpr uint32_t kUnknown = 1u << 0;
inline constexpr uint32_t kUnused = 1u << 1;
inline constexpr uint32_t kNormal = 1u << 2;
inline constexpr uint32_t kControl = 1u << 3;
inline constexpr uint32_t kUserDefined = 1u << 4;
inline constexpr uint32_t kByte = 1u << 5;
inline constexpr uint32_t kNormalized = 1u << 6;
inline constexpr uint32_t kLstrip = 1u << 7;
inline constexpr uint32_t kRstrip = 1u << 8;
inline constexpr uint32_t kSingleWord = 1u << 9;
}  // namespace token_attr

// GGUF tokenizer.ggml.token_type values (llama_token_type).
namespace token_type {
inline constexpr int32_t kUndefined = 0;
inline constexpr int32_t kNormal = 1;
inline constexpr int32_t kUnknown = 2;
inline constexpr int32_t kControl = 3;
inline constexpr int32_t kUserDefined = 4;
inline constexpr int32_t kUnused = 5;
inline constexpr int32_t kByte = 6;
}  // namespace token_type

enum class TokenizerModel { spm, bpe };

// Everything the tokenizer reads from GGUF `tokenizer.ggml.*`, as plain values, so that tests can
// build vocabularies by hand. An absent optional means "key absent": llama.cpp's default applies.
struct VocabSpec {
  std::string model;                  // tokenizer.ggml.model
  std::string pre;                    // tokenizer.ggml.pre ("" = absent)
  std::vector<std::string> tokens;    // tokenizer.ggml.tokens
  std::vector<float> scores;          // tokenizer.ggml.scores (empty = all 0)
  std::vector<int32_t> token_types;   // tokenizer.ggml.token_type (empty = all normal)
  std::optional<std::vector<std::string>> merges;  // tokenizer.ggml.merges, "left right"
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, unk_id, sep_id, pad_id, mask_id;
  std::optional<int64_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos, add_sep, add_space_prefix;
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from the file. Error(unsupported) for an unknown model or
  // pre-tokenizer; Error(invalid_file) for missing or inconsistent vocabulary arrays.
  static Tokenizer from_gguf(const GgufFile& gguf);
  static Tokenizer from_spec(VocabSpec spec);

  // llama_tokenize(vocab, text, add_special, parse_special).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // encode(text, add_special, true), except that a control or unknown token is not cut out where
  // its text would cover one of the byte offsets `literal_at` (ascending): those bytes came from a
  // user and are tokenized as text with the text around them, exactly as parse_special = false
  // would (core/text/chat_prompt.h marks them). User-defined tokens are cut out as always.
  std::vector<int32_t> encode_guarded(std::string_view text, bool add_special, std::span<const size_t> literal_at) const;

  // The bytes a token stands for, as llama_token_to_piece renders them: control and unknown
  // tokens render as their text when `special`, else as nothing; user-defined tokens as their
  // text; SentencePiece '▁' as ' '; byte tokens as the byte; byte-level BPE decoded to bytes.
  // Error(invalid_argument) for an id outside [0, n_vocab).
  std::string token_to_piece(int32_t id, bool special = true) const;

  // llama_detokenize(tokens, remove_special, unparse_special): concatenated pieces, with the
  // SentencePiece prefix space removed from the first piece and, for vocabularies whose
  // pre-tokenizer asks for it (gpt-2, llama-bpe), llama.cpp's clean-up of " ," " ." " 's" etc.
  std::string decode(std::span<const int32_t> tokens, bool remove_special = false,
                     bool unparse_special = false) const;

  TokenizerModel model() const;
  const std::string& pre() const;  // canonical pre-tokenizer name; "" for SentencePiece
  int32_t n_vocab() const;
  int32_t bos() const;
  int32_t eos() const;
  int32_t eot() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  // End of generation: EOS, EOT, EOM and llama.cpp's list of end-of-turn texts.
  bool is_eog(int32_t id) const;

  // Vocabulary entries; Error(invalid_argument) for an id outside [0, n_vocab).
  std::string_view token_text(int32_t id) const;  // valid as long as this Tokenizer (or a copy)
  float token_score(int32_t id) const;
  uint32_t token_attrs(int32_t id) const;
  // The id whose text is exactly `text`, or kNullToken.
  int32_t find_token(std::string_view text) const;
  // Control, user-defined and unknown tokens, longest text first: what the special-token
  // partition cuts out (user-defined always; control and unknown only with parse_special).
  std::span<const int32_t> special_tokens() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::vector<int32_t> encode_fragments(std::string_view text, bool add_special, bool parse_special,
                                        std::span<const size_t> literal_at) const;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace sluice::core
