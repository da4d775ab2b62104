// Building a Tokenizer from GGUF metadata, following llama_vocab::impl::load: per-model defaults,
// then the file's keys, then llama.cpp's detection of end-of-generation and FIM tokens by text.
#include <algorithm>
#include <climits>
#include <cstring>
#include <initializer_list>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer_impl.h"

namespace sluice::core {

namespace {

uint32_t attr_from_type(int32_t type) {
  switch (type) {
    case token_type::kUnknown: return token_attr::kUnknown;
    case token_type::kUnused: return token_attr::kUnused;
    case token_type::kNormal: return token_attr::kNormal;
    case token_type::kControl: return token_attr::kControl;
    case token_type::kUserDefined: return token_attr::kUserDefined;
    case token_type::kByte: return token_attr::kByte;
    default: return token_attr::kUndefined;
  }
}

// A special id from the file replaces the model default only when it is inside the vocabulary;
// a default outside the vocabulary is dropped (llama.cpp logs both and carries on).
void apply_special_id(int32_t& slot, const std::optional<int64_t>& from_file, int32_t n_tokens) {
  if (slot >= n_tokens) slot = kNullToken;
  if (from_file && *from_file >= 0 && *from_file < n_tokens) slot = static_cast<int32_t>(*from_file);
}

void load_vocabulary(Tokenizer::Impl& impl, const std::vector<std::string>& tokens, const VocabSpec& spec) {
  const size_t n = tokens.size();
  if (n == 0) throw Error(ErrorCode::invalid_file, "tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.tokens has " + std::to_string(n) + " entries, more than int32 ids allow");
  }
  if (!spec.scores.empty() && spec.scores.size() < n) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.scores has " + std::to_string(spec.scores.size()) +
                                             " entries for " + std::to_string(n) + " tokens");
  }
  if (!spec.token_types.empty() && spec.token_types.size() < n) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.token_type has " + std::to_string(spec.token_types.size()) +
                                             " entries for " + std::to_string(n) + " tokens");
  }

  size_t bytes = 0;
  for (const std::string& token : tokens) bytes += token.size();
  impl.vocab.reserve(n, bytes);
  impl.scores.assign(n, 0.0f);
  impl.attrs.assign(n, token_attr::kNormal);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    // llama.cpp renames empty tokens so that every id keeps a distinct text.
    const std::string text = tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : std::string();
    const std::string_view stored = tokens[i].empty() ? std::string_view(text) : std::string_view(tokens[i]);
    const int32_t first = impl.vocab.insert(stored, id);
    if (first != id) {
      throw Error(ErrorCode::invalid_file, "duplicate token in tokenizer.ggml.tokens: '" + std::string(stored) +
                                               "' has ids " + std::to_string(first) + " and " + std::to_string(i));
    }
    if (!spec.scores.empty()) impl.scores[i] = spec.scores[i];
    if (!spec.token_types.empty()) impl.attrs[i] = attr_from_type(spec.token_types[i]);
  }
}

void load_merges(Tokenizer::Impl& impl, const std::vector<std::string>& merges) {
  size_t bytes = 0;
  for (const std::string& line : merges) bytes += line.size();
  impl.merge_ranks.reserve(merges.size(), bytes);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // llama.cpp splits at the first space after the first byte; a line without one is ignored
    // (it could never match: symbols are never empty). The first rank of a repeated line wins.
    const std::string& line = merges[rank];
    if (line.find(' ', 1) == std::string::npos) continue;
    impl.merge_ranks.insert(line, static_cast<int32_t>(rank));
  }
}

// llama.cpp finds EOT, EOM and FIM tokens by their text when the file does not name them, and
// forces such tokens (and every end-of-generation text) to be control tokens. When a vocabulary
// holds two candidates for one slot the lower id wins; llama.cpp takes the first in hash-map
// order, so eot() may differ there (the end-of-generation set does not).
void detect_special_tokens(Tokenizer::Impl& impl) {
  // Lookups by text rather than a scan of the vocabulary: a few hundred hash probes instead of
  // millions of comparisons on a 150k-token vocabulary.
  const auto detect = [&](int32_t& slot, std::initializer_list<std::string_view> texts) {
    if (slot != kNullToken) return;
    for (std::string_view text : texts) {
      const int32_t id = impl.find(text);
      if (id != kNullToken && (slot == kNullToken || id < slot)) slot = id;
    }
    if (slot != kNullToken) impl.attrs[slot] |= token_attr::kControl;
  };
  detect(impl.eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"});
  detect(impl.eom, {"<|eom_id|>"});
  detect(impl.fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                        "<|code_prefix|>", "<|prefix|>"});
  detect(impl.fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                        "<|code_suffix|>", "<|suffix|>"});
  detect(impl.fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                        "<|code_middle|>", "<|middle|>"});
  detect(impl.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(impl.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  detect(impl.fim_sep, {"<|file_sep|>"});

  for (int32_t id : {impl.fim_pad, impl.fim_rep, impl.fim_sep}) {
    if (id != kNullToken) impl.eog.insert(id);
  }
  for (std::string_view text :
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["}) {
    const int32_t id = impl.find(text);
    if (id == kNullToken) continue;
    impl.eog.insert(id);
    impl.attrs[id] |= token_attr::kControl;
  }
  // gpt-oss: these must always render, so they are user-defined whatever the file says.
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const int32_t id = impl.find(text);
    if (id != kNullToken) impl.attrs[id] = token_attr::kUserDefined;
  }
  for (int32_t id : {impl.eos, impl.eot, impl.eom}) {
    if (id != kNullToken) impl.eog.insert(id);
  }

  // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
  const auto eog_text = [&](std::string_view text) {
    const int32_t id = impl.find(text);
    return id != kNullToken && impl.eog.count(id) ? id : kNullToken;
  };
  const int32_t end_id = eog_text("<|end|>");
  const bool has_call = eog_text("<|call|>") != kNullToken || eog_text("<|calls|>") != kNullToken;
  if (end_id != kNullToken && has_call &&
      (eog_text("<|return|>") != kNullToken || eog_text("<|flush|>") != kNullToken)) {
    impl.eog.erase(end_id);
    impl.attrs[end_id] = token_attr::kUserDefined;
  }
  // gemma4 / paddleocr: "</s>" is an ordinary token next to "<|tool_response>".
  const int32_t s_id = eog_text("</s>");
  if (s_id != kNullToken && eog_text("<|tool_response>") != kNullToken) {
    impl.eog.erase(s_id);
    impl.attrs[s_id] = token_attr::kNormal;
  }
}

void build_caches(Tokenizer::Impl& impl) {
  constexpr uint32_t kPartitioned = token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown;
  for (int32_t id = 0; id < impl.n_tokens(); ++id) {
    if (impl.attrs[id] & kPartitioned) impl.special_tokens.push_back(id);
  }
  // llama.cpp uses an unstable sort; equal lengths only matter for overlapping equal-length texts.
  std::stable_sort(impl.special_tokens.begin(), impl.special_tokens.end(),
                   [&](int32_t a, int32_t b) { return impl.text(a).size() > impl.text(b).size(); });

  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char hex[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = impl.find(std::string_view(hex, sizeof(hex)));
    if (id == kNullToken) {
      const char raw = static_cast<char>(b);
      id = impl.find(std::string_view(&raw, 1));
    }
    impl.byte_tokens[b] = id;
  }
}

// `tokens` and `merges` are passed apart from `spec` so that from_gguf can hand over the file's
// arrays without copying them.
void build(Tokenizer::Impl& impl, const VocabSpec& spec, const std::vector<std::string>& tokens,
           const std::vector<std::string>* merges) {
  // Model type and llama.cpp's defaults for it.
  if (spec.model == "llama") {
    impl.model = TokenizerModel::spm;
    impl.bos = 1;
    impl.eos = 2;
    impl.unk = 0;
    impl.add_space_prefix = true;
    impl.clean_spaces = false;
    impl.add_bos = true;
    impl.add_eos = false;
  } else if (spec.model == "gpt2") {
    impl.model = TokenizerModel::bpe;
    if (spec.pre.empty()) {
      throw Error(ErrorCode::unsupported,
                  "byte-level BPE vocabulary without tokenizer.ggml.pre: llama.cpp's 'default' pre-tokenizer is "
                  "not supported");
    }
    impl.pre = PreTokenizer::create(spec.pre);
    if (merges == nullptr && impl.pre->name() != "kimi-k2") {  // llama.cpp lets only Kimi-K2 omit them
      throw Error(ErrorCode::invalid_file, "byte-level BPE vocabulary without tokenizer.ggml.merges");
    }
    impl.bos = 11;
    impl.eos = 11;
    impl.add_space_prefix = false;
    impl.clean_spaces = impl.pre->clean_spaces();
    impl.ignore_merges = impl.pre->ignore_merges();
    impl.add_bos = impl.pre->add_bos();
    impl.add_eos = false;
  } else {
    throw Error(ErrorCode::unsupported, "unsupported tokenizer model 'tokenizer.ggml.model' = '" + spec.model +
                                            "' (supported: llama, gpt2)");
  }
  if (spec.add_space_prefix) impl.add_space_prefix = *spec.add_space_prefix;

  load_vocabulary(impl, tokens, spec);
  if (merges != nullptr) load_merges(impl, *merges);

  const int32_t n = impl.n_tokens();
  apply_special_id(impl.bos, spec.bos_id, n);
  apply_special_id(impl.eos, spec.eos_id, n);
  apply_special_id(impl.eot, spec.eot_id, n);
  apply_special_id(impl.eom, spec.eom_id, n);
  apply_special_id(impl.unk, spec.unk_id, n);
  apply_special_id(impl.sep, spec.sep_id, n);
  apply_special_id(impl.pad, spec.pad_id, n);
  apply_special_id(impl.mask, spec.mask_id, n);
  apply_special_id(impl.fim_pre, spec.fim_pre_id, n);
  apply_special_id(impl.fim_suf, spec.fim_suf_id, n);
  apply_special_id(impl.fim_mid, spec.fim_mid_id, n);
  apply_special_id(impl.fim_pad, spec.fim_pad_id, n);
  apply_special_id(impl.fim_rep, spec.fim_rep_id, n);
  apply_special_id(impl.fim_sep, spec.fim_sep_id, n);

  if (spec.add_bos) impl.add_bos = *spec.add_bos;
  if (spec.add_eos) impl.add_eos = *spec.add_eos;
  if (spec.add_sep) impl.add_sep = *spec.add_sep;
  if (impl.add_bos && impl.bos == kNullToken) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  }
  if (impl.add_eos && impl.eos == kNullToken) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
  }

  detect_special_tokens(impl);
  build_caches(impl);
}

std::optional<int64_t> optional_id(const GgufFile& gguf, std::string_view key) {
  if (!gguf.has(key)) return std::nullopt;
  const uint64_t value = gguf.get_uint(key);
  return value > static_cast<uint64_t>(INT32_MAX) ? -1 : static_cast<int64_t>(value);
}

std::optional<bool> optional_bool(const GgufFile& gguf, std::string_view key) {
  if (!gguf.has(key)) return std::nullopt;
  return gguf.get_bool(key);
}

// Scores are float32 in every converter; llama.cpp also accepts int32, and so does
// get_float_array.
std::vector<float> read_scores(const GgufFile& gguf) {
  constexpr std::string_view kKey = "tokenizer.ggml.scores";
  return gguf.has(kKey) ? gguf.get_float_array(kKey) : std::vector<float>();
}

std::vector<int32_t> read_token_types(const GgufFile& gguf) {
  constexpr std::string_view kKey = "tokenizer.ggml.token_type";
  if (!gguf.has(kKey)) return {};
  std::vector<int32_t> types;
  for (int64_t v : gguf.get_int_array(kKey)) {
    types.push_back(v < INT32_MIN || v > INT32_MAX ? token_type::kUndefined : static_cast<int32_t>(v));
  }
  return types;
}

}  // namespace

Tokenizer Tokenizer::from_spec(VocabSpec spec) {
  auto impl = std::make_shared<Impl>();
  build(*impl, spec, spec.tokens, spec.merges ? &*spec.merges : nullptr);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gguf(const GgufFile& gguf) {
  VocabSpec spec;
  spec.model = gguf.get_string("tokenizer.ggml.model");
  spec.pre = gguf.get_string_or("tokenizer.ggml.pre", "");
  // Refuse an unknown model before reading a vocabulary that would be thrown away.
  if (spec.model != "llama" && spec.model != "gpt2") return from_spec(std::move(spec));
  spec.scores = read_scores(gguf);
  spec.token_types = read_token_types(gguf);

  spec.bos_id = optional_id(gguf, "tokenizer.ggml.bos_token_id");
  spec.eos_id = optional_id(gguf, "tokenizer.ggml.eos_token_id");
  spec.eot_id = optional_id(gguf, "tokenizer.ggml.eot_token_id");
  spec.eom_id = optional_id(gguf, "tokenizer.ggml.eom_token_id");
  spec.unk_id = optional_id(gguf, "tokenizer.ggml.unknown_token_id");
  spec.sep_id = optional_id(gguf, "tokenizer.ggml.seperator_token_id");  // sic, llama.cpp's key
  spec.pad_id = optional_id(gguf, "tokenizer.ggml.padding_token_id");
  spec.mask_id = optional_id(gguf, "tokenizer.ggml.mask_token_id");
  spec.fim_pre_id = optional_id(gguf, "tokenizer.ggml.fim_pre_token_id");
  spec.fim_suf_id = optional_id(gguf, "tokenizer.ggml.fim_suf_token_id");
  spec.fim_mid_id = optional_id(gguf, "tokenizer.ggml.fim_mid_token_id");
  spec.fim_pad_id = optional_id(gguf, "tokenizer.ggml.fim_pad_token_id");
  spec.fim_rep_id = optional_id(gguf, "tokenizer.ggml.fim_rep_token_id");
  spec.fim_sep_id = optional_id(gguf, "tokenizer.ggml.fim_sep_token_id");
  // Deprecated spellings, read after the current ones as llama.cpp does (they win when both exist).
  if (auto id = optional_id(gguf, "tokenizer.ggml.prefix_token_id")) spec.fim_pre_id = id;
  if (auto id = optional_id(gguf, "tokenizer.ggml.suffix_token_id")) spec.fim_suf_id = id;
  if (auto id = optional_id(gguf, "tokenizer.ggml.middle_token_id")) spec.fim_mid_id = id;

  spec.add_bos = optional_bool(gguf, "tokenizer.ggml.add_bos_token");
  spec.add_eos = optional_bool(gguf, "tokenizer.ggml.add_eos_token");
  spec.add_sep = optional_bool(gguf, "tokenizer.ggml.add_sep_token");
  spec.add_space_prefix = optional_bool(gguf, "tokenizer.ggml.add_space_prefix");

  const auto& tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  const std::vector<std::string>* merges =
      gguf.has("tokenizer.ggml.merges") ? &gguf.get_string_array("tokenizer.ggml.merges") : nullptr;
  auto impl = std::make_shared<Impl>();
  build(*impl, spec, tokens, merges);
  return Tokenizer(std::move(impl));
}

}  // namespace sluice::core
