// Tokenizer front end: the special-token partition, BOS/EOS, and detokenization
// (llama_vocab::impl::tokenize, token_to_piece and detokenize).
#include "core/text/tokenizer.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "core/text/tokenizer_impl.h"
#include "core/text/unicode_utf8.h"

namespace sluice::core {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// A stretch of the input: either plain text (offset/length into the input) or one special token.
struct Fragment {
  int32_t token;  // kNullToken for text
  size_t offset;
  size_t length;
};

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// True when a special-token match [begin, end) covers one of the sorted `literal_at` offsets.
bool covers_literal(std::span<const size_t> literal_at, size_t begin, size_t end) {
  const auto it = std::lower_bound(literal_at.begin(), literal_at.end(), begin);
  return it != literal_at.end() && *it < end;
}

// Cuts special-token texts out of `text`, longest first; each token is searched only in the
// text still left between earlier cuts (llama.cpp's tokenizer_st_partition). A control or
// unknown token whose match covers a `literal_at` offset stays text (encode_guarded).
std::vector<Fragment> partition(const Tokenizer::Impl& impl, std::string_view text, bool parse_special,
                                std::span<const size_t> literal_at) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({kNullToken, 0, text.size()});

  std::vector<Fragment> next;
  for (int32_t special : impl.special_tokens) {
    const uint32_t attr = impl.attrs[special];
    // Without parse_special only user-defined tokens are cut out (as Hugging Face does).
    if (!parse_special && (attr & (token_attr::kControl | token_attr::kUnknown))) continue;
    const std::string_view needle = impl.text(special);

    const bool guarded = !literal_at.empty() && (attr & (token_attr::kControl | token_attr::kUnknown));

    next.clear();
    bool changed = false;
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNullToken) {
        next.push_back(fragment);
        continue;
      }
      size_t begin = fragment.offset;
      const size_t end = fragment.offset + fragment.length;
      size_t search = begin;
      while (search < end) {
        const size_t match = text.substr(0, end).find(needle, search);
        if (match == std::string_view::npos) break;
        if (guarded && covers_literal(literal_at, match, match + needle.size())) {
          search = match + 1;  // the user's text: left in the fragment, tokenized as text
          continue;
        }
        changed = true;
        size_t left_length = match - begin;
        if (attr & token_attr::kLstrip) {
          while (left_length > 0 && is_space(text[begin + left_length - 1])) --left_length;
        }
        if (left_length > 0) next.push_back({kNullToken, begin, left_length});
        next.push_back({special, match, needle.size()});
        begin = match + needle.size();
        if (attr & token_attr::kRstrip) {
          while (begin < end && is_space(text[begin])) ++begin;
        }
        search = begin;
      }
      if (begin < end) next.push_back({kNullToken, begin, end - begin});
    }
    if (changed) fragments.swap(next);
  }
  return fragments;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out.append(to);
  }
  out.append(text, pos);
  text.swap(out);
}

// Byte-level BPE token text back to bytes. A code point outside GPT-2's alphabet cannot come
// from a byte; llama.cpp renders it as "[UNK_BYTE_0x<its utf-8 in hex><the token text>]".
std::string decode_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (uint32_t cpt : utf8::decode_lossy(text)) {
    const int byte = utf8::symbol_to_byte(cpt);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    std::string cpt_utf8;
    utf8::append(cpt_utf8, cpt);
    out += "[UNK_BYTE_0x";
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : cpt_utf8) {
      out.push_back(kHex[static_cast<uint8_t>(c) >> 4]);
      out.push_back(kHex[static_cast<uint8_t>(c) & 15]);
    }
    out.append(text);
    out += "]";
  }
  return out;
}

// "<0xXX>" -> XX, parsed like llama.cpp's strtol on the two characters after "<0x".
char byte_token_value(std::string_view text) {
  const std::string hex(text.size() >= 5 ? text.substr(3, 2) : std::string_view());
  return static_cast<char>(std::strtol(hex.c_str(), nullptr, 16));
}

const Tokenizer::Impl& checked(const std::shared_ptr<const Tokenizer::Impl>& impl, int32_t id) {
  if (id < 0 || id >= impl->n_tokens()) {
    throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                 std::to_string(impl->n_tokens()) + ")");
  }
  return *impl;
}

std::string render_piece(const Tokenizer::Impl& impl, int32_t id, bool special) {
  constexpr uint32_t kSpecial = token_attr::kUnknown | token_attr::kControl;
  const uint32_t attr = impl.attrs[id];
  const std::string_view text = impl.text(id);
  if (!special && (attr & kSpecial)) return {};
  if (attr & (kSpecial | token_attr::kUserDefined)) return std::string(text);
  if (attr & token_attr::kNormal) {
    if (impl.model == TokenizerModel::bpe) return decode_byte_level(text);
    std::string piece(text);
    replace_all(piece, kSpmSpace, " ");
    return piece;
  }
  if (attr & token_attr::kByte) return std::string(1, byte_token_value(text));
  return {};  // unused and undefined tokens render as nothing
}

// llama.cpp's three in-place clean-up passes for clean_spaces vocabularies (gpt-2, llama-bpe).
// They are ported as written, in place, because each pass reads bytes the pass itself may have
// rewritten.
void clean_up_spaces(std::string& s) {
  size_t total = s.size();
  // " ?", " !", " .", " ,": drop the space.
  {
    const size_t n = total;
    total = n ? 1 : 0;
    for (size_t i = 1; i < n; ++i) {
      const char x = s[i];
      if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
      s[total++] = x;
    }
  }
  // " ' ": drop both spaces around a lone apostrophe.
  {
    const size_t n = total;
    total = n ? 1 : 0;
    for (size_t i = 1; i < n; ++i) {
      const char x = s[i];
      if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
        --total;
        s[++i] = '\0';
      }
      s[total++] = x;
    }
  }
  // " 's", " 'm", " 're", " 've": drop the space before the contraction.
  {
    const size_t n = total;
    total = n ? 1 : 0;
    for (size_t i = 1; i < n; ++i) {
      const char x = s[i];
      if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
        const char x1 = s[i + 1];
        if (x1 == 's' || x1 == 'm') {
          --total;
        } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
          const char x2 = s[i + 2];
          if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
        }
      }
      s[total++] = x;
    }
  }
  s.resize(total);
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode_fragments(text, add_special, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode_guarded(std::string_view text, bool add_special,
                                               std::span<const size_t> literal_at) const {
  if (!std::is_sorted(literal_at.begin(), literal_at.end()))
    throw Error(ErrorCode::internal, "encode_guarded: literal offsets must be sorted");
  return encode_fragments(text, add_special, true, literal_at);
}

std::vector<int32_t> Tokenizer::encode_fragments(std::string_view text, bool add_special, bool parse_special,
                                                 std::span<const size_t> literal_at) const {
  const Impl& impl = *impl_;
  std::vector<int32_t> out;
  const std::vector<Fragment> fragments = partition(impl, text, parse_special, literal_at);

  if (add_special && impl.add_bos) out.push_back(impl.bos);
  if (impl.model == TokenizerModel::spm) {
    bool prefix_space = true;  // at the start and after every special token
    std::string piece;
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNullToken) {
        out.push_back(fragment.token);
        prefix_space = true;
        continue;
      }
      piece.clear();
      if (impl.add_space_prefix && prefix_space) piece.push_back(' ');
      piece.append(text.substr(fragment.offset, fragment.length));
      replace_all(piece, " ", kSpmSpace);
      spm_tokenize(impl, piece, out);
      prefix_space = false;
    }
  } else {
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNullToken) {
        out.push_back(fragment.token);
      } else {
        bpe_tokenize(impl, text.substr(fragment.offset, fragment.length), out);
      }
    }
  }
  if (add_special && impl.add_eos) out.push_back(impl.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  return render_piece(checked(impl_, id), id, special);
}

std::string Tokenizer::decode(std::span<const int32_t> tokens, bool remove_special, bool unparse_special) const {
  const Impl& impl = *impl_;
  bool remove_space = impl.add_space_prefix;
  if (remove_special && impl.add_bos && !tokens.empty() && tokens.front() == impl.bos) {
    remove_space = false;
    tokens = tokens.subspan(1);
  }
  if (remove_special && impl.add_eos && !tokens.empty() && tokens.back() == impl.eos) {
    tokens = tokens.first(tokens.size() - 1);
  }

  std::string text;
  for (int32_t id : tokens) {
    std::string piece = render_piece(checked(impl_, id), id, unparse_special);
    // Only the very first token loses its leading space, even when it renders as nothing.
    if (remove_space && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    remove_space = false;
    text += piece;
  }
  if (impl.clean_spaces) clean_up_spaces(text);
  return text;
}

TokenizerModel Tokenizer::model() const { return impl_->model; }
const std::string& Tokenizer::pre() const {
  static const std::string kNone;
  return impl_->pre ? impl_->pre->name() : kNone;
}
int32_t Tokenizer::n_vocab() const { return impl_->n_tokens(); }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
int32_t Tokenizer::unk() const { return impl_->unk; }
int32_t Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }
bool Tokenizer::is_eog(int32_t id) const { return id != kNullToken && impl_->eog.count(id) > 0; }

std::string_view Tokenizer::token_text(int32_t id) const { return checked(impl_, id).text(id); }
float Tokenizer::token_score(int32_t id) const { return checked(impl_, id).scores[id]; }
uint32_t Tokenizer::token_attrs(int32_t id) const { return checked(impl_, id).attrs[id]; }
int32_t Tokenizer::find_token(std::string_view text) const { return impl_->find(text); }
std::span<const int32_t> Tokenizer::special_tokens() const { return impl_->special_tokens; }

}  // namespace sluice::core
