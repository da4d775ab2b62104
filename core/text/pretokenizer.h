// Byte-level BPE pre-tokenization: cutting text into words before merges run, exactly where
// llama.cpp cuts it (unicode_regex_split).
//
// llama.cpp describes each pre-tokenizer type as a list of regexes applied in sequence: the first
// runs over the whole text; each later one runs separately inside every piece the previous one
// produced, so no word ever spans a cut made earlier. Within a piece, every match is a word and
// so is every run of text between matches (a "gap"). Words concatenated give back the text.
//
// llama.cpp does not actually run every regex as written. Some (gpt-2, llama-bpe, qwen2, kimi-k2)
// are executed by hand-written scanners, and the rest (deepseek-v3, deepseek-llm) by std::regex
// over a text in which each non-ASCII code point is collapsed to one byte standing for its Unicode
// category. The scanners depart from their regex in small ways; sluice runs PCRE2 (UTF + UCP) with
// patterns adjusted so the words come out as llama.cpp's do:
//   - scanners: an unassigned code point (category Cn) never joins a [^\s\p{L}\p{N}] run, and
//     unmatched text becomes one word per code point (std::regex keeps a gap as one word);
//   - kimi-k2's scanner implements neither the upper/lower-case split of the published regex nor
//     \p{M}: a word is a plain run of non-Han letters. Han is llama.cpp's fixed list of CJK blocks
//     (unicode_cpt_is_han), not the Unicode script property.
// The reference is llama.cpp v0.5.0 (2026-09): Qwen2 has had its scanner since early 2026, and
// the collapsed \p{S} includes '~' since 2026-08 (ggml-org/llama.cpp#26972).
//
// Malformed UTF-8 is decoded as llama.cpp decodes it (see unicode_utf8.h) and comes out of
// split() as U+FFFD, because llama.cpp rebuilds the words from code points.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::core {

class PreTokenizer {
 public:
  // `pre` is GGUF tokenizer.ggml.pre. Supported: gpt-2; llama-bpe (aliases llama3, llama-v3);
  // qwen2 (alias deepseek-r1-qwen); deepseek-v3; deepseek-llm; kimi-k2.
  // Anything else throws Error(unsupported) naming it.
  static PreTokenizer create(std::string_view pre);

  const std::string& name() const { return name_; }
  // llama.cpp's per-type switches (llama_vocab::impl::load).
  bool ignore_merges() const { return ignore_merges_; }  // a word that is a token is emitted whole
  bool add_bos() const { return add_bos_; }              // default when the GGUF does not say
  bool clean_spaces() const { return clean_spaces_; }    // detokenizer drops " ," " ." etc.

  // The words of `text`, in order, before byte-level encoding.
  std::vector<std::string> split(std::string_view text) const;

  struct Pass;  // one compiled regex and its gap rule (defined in the .cpp)

 private:
  PreTokenizer() = default;  // only create() makes one

  std::string name_;
  bool ignore_merges_ = false;
  bool add_bos_ = false;
  bool clean_spaces_ = true;
  std::shared_ptr<const std::vector<Pass>> passes_;
};

}  // namespace sluice::core
