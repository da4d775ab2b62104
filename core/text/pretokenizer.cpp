#include "core/text/pretokenizer.h"

#include <algorithm>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/error.h"
#include "core/text/unicode_utf8.h"

namespace sluice::core {

namespace {

// ---- patterns (PCRE2 syntax; see the header for why they differ from llama.cpp's text) ----

// llama.cpp's GPT-2 scanner (unicode_regex_split_custom_gpt2). Its trailing \s+ is implicit in
// llama.cpp's table but implemented by the scanner.
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}\p{Cn}]+|\s+(?!\S)|\s+)re";

// llama.cpp's Llama 3 scanner (unicode_regex_split_custom_llama3).
constexpr const char* kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}\p{Cn}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// llama.cpp's Qwen2 scanner (unicode_regex_split_custom_qwen2): the Llama 3 scanner with single
// digits.
constexpr const char* kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}\p{Cn}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// llama.cpp's Kimi-K2 scanner (unicode_regex_split_custom_kimi_k2). Han is llama.cpp's list of
// CJK blocks; [^\P{L}<Han>] is "a letter outside those blocks" as one class (a per-character
// lookahead would cost 20x on long letter runs).
#define SLUICE_KIMI_HAN_RANGES \
  R"re(\x{3400}-\x{4DBF}\x{4E00}-\x{9FFF}\x{F900}-\x{FAFF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2EBEF}\x{2F800}-\x{2FA1F})re"
constexpr const char* kKimiK2 =
    "[" SLUICE_KIMI_HAN_RANGES "]+|[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}" SLUICE_KIMI_HAN_RANGES "]+"
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}\p{Cn}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
#undef SLUICE_KIMI_HAN_RANGES

// DeepSeek-V3: three std::regex passes; category collapsing changes nothing for their classes
// (llama.cpp's collapsed \p{S} lacked '~' until mid-2026; the reference build has the fix).
constexpr const char* kDeepseekV3Numbers = R"re(\p{N}{1,3})re";
constexpr const char* kDeepseekV3Cjk = R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";
constexpr const char* kDeepseekV3Words =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// DeepSeek LLM: six std::regex passes; the letter class is the published one, spelled out.
constexpr const char* kDeepseekLlmNewline = "[\\r\\n]";
constexpr const char* kDeepseekLlmLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
constexpr const char* kDeepseekLlmPunct =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
constexpr const char* kDeepseekLlmTrailingSpace = R"re(\s+$)re";
constexpr const char* kDeepseekLlmCjk = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
constexpr const char* kDeepseekLlmNumbers = R"re(\p{N}+)re";

// How text between matches becomes words: llama.cpp's scanners emit one word per unmatched code
// point; its std::regex path keeps a whole gap as one word.
enum class Gaps { per_code_point, whole };

struct PassSpec {
  const char* pattern;
  Gaps gaps;
};

struct PreSpec {
  std::vector<std::string_view> names;  // tokenizer.ggml.pre values, canonical first
  std::vector<PassSpec> passes;
  bool ignore_merges;
  bool add_bos;
  bool clean_spaces;
};

const std::vector<PreSpec>& pre_specs() {
  static const std::vector<PreSpec> specs = {
      {{"gpt-2"}, {{kGpt2, Gaps::per_code_point}}, false, false, true},
      {{"llama-bpe", "llama3", "llama-v3"}, {{kLlama3, Gaps::per_code_point}}, true, true, true},
      {{"qwen2", "deepseek-r1-qwen"}, {{kQwen2, Gaps::per_code_point}}, false, false, false},
      {{"deepseek-v3"},
       {{kDeepseekV3Numbers, Gaps::whole}, {kDeepseekV3Cjk, Gaps::whole}, {kDeepseekV3Words, Gaps::whole}},
       false, false, false},
      {{"deepseek-llm"},
       {{kDeepseekLlmNewline, Gaps::whole},
        {kDeepseekLlmLetters, Gaps::whole},
        {kDeepseekLlmPunct, Gaps::whole},
        {kDeepseekLlmTrailingSpace, Gaps::whole},
        {kDeepseekLlmCjk, Gaps::whole},
        {kDeepseekLlmNumbers, Gaps::whole}},
       false, false, false},
      {{"kimi-k2"}, {{kKimiK2, Gaps::per_code_point}}, false, false, false},
  };
  return specs;
}

// llama.cpp's whitespace: the Unicode White_Space property. PCRE2's \s also takes U+180E, which
// stopped being a space in Unicode 6.3, so every \s and \S is rewritten to this exact set.
constexpr std::string_view kWhitespace =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string with_llama_whitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kWhitespace) : "[" + std::string(kWhitespace) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespace) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

struct PreTokenizer::Pass {
  std::unique_ptr<pcre2_code, CodeDeleter> code;
  Gaps gaps = Gaps::whole;
};

namespace {

PreTokenizer::Pass compile(const PassSpec& spec, std::string_view pre) {
  // UCP gives \s, \p{..} and friends their Unicode meaning; MATCH_INVALID_UTF keeps matching
  // defined on the surrogate bytes that llama-style decoding can let through; DOLLAR_ENDONLY
  // gives $ std::regex's meaning (end of subject only).
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
  const std::string pattern = with_llama_whitespace(spec.pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(ErrorCode::internal, "pre-tokenizer '" + std::string(pre) + "': regex does not compile at offset " +
                                         std::to_string(error_offset) + ": " +
                                         reinterpret_cast<const char*>(message));
  }
  // JIT is an optimization only; without it PCRE2 interprets the same pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  PreTokenizer::Pass pass;
  pass.code.reset(code);
  pass.gaps = spec.gaps;
  return pass;
}

// Appends word ends (absolute byte offsets) for text[begin, end) under one pass.
void run_pass(const PreTokenizer::Pass& pass, pcre2_match_data* match, std::string_view text, size_t begin,
              size_t end, std::vector<size_t>& ends) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
  const size_t length = end - begin;

  const auto emit_gap = [&](size_t from, size_t to) {
    if (from >= to) return;
    if (pass.gaps == Gaps::whole) {
      ends.push_back(begin + to);
      return;
    }
    while (from < to) {
      from = std::min(to, from + utf8::sequence_length(static_cast<uint8_t>(text[begin + from])));
      ends.push_back(begin + from);
    }
  };

  size_t pos = 0;
  while (pos < length) {
    int rc = pcre2_match(pass.code.get(), subject, length, pos, 0, match, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // The JIT's fixed stack can run out on pathological input; the interpreter's heap cannot.
      rc = pcre2_match(pass.code.get(), subject, length, pos, PCRE2_NO_JIT, match, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(ErrorCode::internal, std::string("pre-tokenizer regex failed: ") +
                                           reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t match_begin = ovector[0];
    const size_t match_end = ovector[1];
    emit_gap(pos, match_begin);
    if (match_end == match_begin) {
      // None of the patterns can match empty; if one ever does, step over a code point.
      const size_t next = std::min(length, match_begin + utf8::sequence_length(subject[match_begin]));
      emit_gap(match_begin, next);
      pos = next;
      continue;
    }
    ends.push_back(begin + match_end);
    pos = match_end;
  }
  emit_gap(pos, length);
}

}  // namespace

PreTokenizer PreTokenizer::create(std::string_view pre) {
  for (const PreSpec& spec : pre_specs()) {
    bool named = false;
    for (std::string_view name : spec.names) named = named || name == pre;
    if (!named) continue;

    auto passes = std::make_shared<std::vector<Pass>>();
    for (const PassSpec& pass : spec.passes) passes->push_back(compile(pass, pre));
    PreTokenizer out;
    out.name_ = std::string(spec.names.front());
    out.ignore_merges_ = spec.ignore_merges;
    out.add_bos_ = spec.add_bos;
    out.clean_spaces_ = spec.clean_spaces;
    out.passes_ = std::move(passes);
    return out;
  }
  std::string known;
  for (const PreSpec& spec : pre_specs()) {
    for (std::string_view name : spec.names) known += (known.empty() ? "" : ", ") + std::string(name);
  }
  throw Error(ErrorCode::unsupported, "unsupported BPE pre-tokenizer 'tokenizer.ggml.pre' = '" + std::string(pre) +
                                          "' (supported: " + known + ")");
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  // `clean` is what the words are cut from. `subject` is what the regexes see: the same bytes,
  // except that a surrogate (which lenient decoding lets through, but PCRE2 cannot match) is
  // replaced by U+E000, another "other" code point of the same UTF-8 length.
  std::string clean, subject;
  clean.reserve(text.size());
  bool has_surrogate = false;
  for (uint32_t cpt : utf8::decode_lossy(text)) {
    utf8::append(clean, cpt);
    has_surrogate = has_surrogate || (cpt >= 0xD800 && cpt <= 0xDFFF);
  }
  if (has_surrogate) {
    for (uint32_t cpt : utf8::decode_lossy(clean)) utf8::append(subject, cpt >= 0xD800 && cpt <= 0xDFFF ? 0xE000 : cpt);
  }
  const std::string& matched = has_surrogate ? subject : clean;

  std::vector<size_t> ends;  // exclusive end of each current piece
  if (!clean.empty()) ends.push_back(clean.size());

  for (const Pass& pass : *passes_) {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
        pcre2_match_data_create_from_pattern(pass.code.get(), nullptr));
    std::vector<size_t> next;
    next.reserve(ends.size() * 2);
    size_t begin = 0;
    for (size_t end : ends) {
      run_pass(pass, match.get(), matched, begin, end, next);
      begin = end;
    }
    ends = std::move(next);
  }

  std::vector<std::string> words;
  words.reserve(ends.size());
  size_t begin = 0;
  for (size_t end : ends) {
    words.emplace_back(clean.substr(begin, end - begin));
    begin = end;
  }
  return words;
}

}  // namespace sluice::core
