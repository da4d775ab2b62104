// Tokenizer behaviour on small hand-built vocabularies: merge order, byte fallback, special
// tokens, BOS/EOS, detokenization and rejected inputs. Expected ids follow from llama.cpp's
// rules as documented in core/text/tokenizer.h.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"
#include "core/text/unicode_utf8.h"
#include "io/pread_reader.h"
#include "tests/gguf_bytes.h"
#include "tests/test_support.h"

using sluice::Error;
using sluice::ErrorCode;
using sluice::core::Tokenizer;
using sluice::core::VocabSpec;
namespace tt = sluice::core::token_type;
using Ids = std::vector<int32_t>;

namespace {

// SentencePiece: <unk> <s> </s>, 256 byte tokens (ids 3..258), then pieces.
VocabSpec spm_spec(const std::vector<std::pair<std::string, float>>& pieces) {
  VocabSpec spec;
  spec.model = "llama";
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.token_types = {tt::kUnknown, tt::kControl, tt::kControl};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    spec.token_types.push_back(tt::kByte);
  }
  for (const auto& [text, score] : pieces) {
    spec.tokens.push_back(text);
    spec.token_types.push_back(tt::kNormal);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  for (size_t i = 0; i < pieces.size(); ++i) spec.scores[259 + i] = pieces[i].second;
  return spec;
}

constexpr int32_t kSpmFirstPiece = 259;
int32_t spm_byte(uint8_t b) { return 3 + b; }

// Byte-level BPE: the 256 alphabet symbols (id = byte), then `extra` tokens, with `merges`.
VocabSpec bpe_spec(const std::vector<std::string>& extra, const std::vector<std::string>& merges) {
  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) spec.tokens.emplace_back(sluice::core::utf8::byte_to_symbol(static_cast<uint8_t>(b)));
  for (const std::string& t : extra) spec.tokens.push_back(t);
  spec.merges = merges;
  return spec;
}

Error error_of(VocabSpec spec) {
  try {
    Tokenizer::from_spec(std::move(spec));
  } catch (const Error& e) {
    return e;
  }
  FAIL("the vocabulary was accepted");
  return Error(ErrorCode::internal, "unreachable");
}

void check_error(const Error& e, ErrorCode code, const std::string& fragment) {
  CHECK(e.code() == code);
  CHECK_MESSAGE(std::string(e.what()).find(fragment) != std::string::npos, "message: ", std::string(e.what()));
}

}  // namespace

TEST_CASE("SentencePiece merges the highest-scoring pair first") {
  // "ab" -> text "▁ab": the pairs "▁a" and "ab" compete; no "▁ab" token exists.
  const Tokenizer a_first = Tokenizer::from_spec(spm_spec({{"\xE2\x96\x81", -5}, {"a", -5}, {"b", -5},
                                                           {"\xE2\x96\x81" "a", -1}, {"ab", -2}}));
  CHECK(a_first.encode("ab", false, false) == Ids{kSpmFirstPiece + 3, kSpmFirstPiece + 2});
  const Tokenizer ab_first = Tokenizer::from_spec(spm_spec({{"\xE2\x96\x81", -5}, {"a", -5}, {"b", -5},
                                                            {"\xE2\x96\x81" "a", -2}, {"ab", -1}}));
  CHECK(ab_first.encode("ab", false, false) == Ids{kSpmFirstPiece, kSpmFirstPiece + 4});
}

TEST_CASE("SentencePiece falls back to byte tokens and adds BOS, prefix spaces and specials") {
  const Tokenizer tok = Tokenizer::from_spec(spm_spec({{"\xE2\x96\x81", -5}, {"a", -5}, {"\xE2\x96\x81" "a", -1}}));
  const int32_t sp = kSpmFirstPiece, sp_a = kSpmFirstPiece + 2;
  // 'c' and 'é' (C3 A9) are not pieces: their bytes are emitted.
  CHECK(tok.encode("ac", false, false) == Ids{sp_a, spm_byte('c')});
  CHECK(tok.encode("\xC3\xA9", false, false) == Ids{sp, spm_byte(0xC3), spm_byte(0xA9)});
  CHECK(tok.add_bos());
  CHECK(tok.encode("a", true, false) == Ids{1, sp_a});
  CHECK(tok.encode("", true, false) == Ids{1});
  CHECK(tok.encode("", false, false) == Ids{});
  // Control tokens are text unless parse_special; after one, a prefix space is added again.
  CHECK(tok.encode("a</s>a", false, true) == Ids{sp_a, 2, sp_a});
  const Ids as_text = tok.encode("</s>", false, false);
  CHECK(as_text.front() == sp);
  CHECK(as_text.size() == 5);  // ▁ < / s > as "▁" + four byte tokens
}

TEST_CASE("SentencePiece pieces and detokenization follow llama.cpp") {
  const Tokenizer tok = Tokenizer::from_spec(spm_spec({{"\xE2\x96\x81", -5}, {"a", -5}, {"\xE2\x96\x81" "a", -1}}));
  const int32_t sp_a = kSpmFirstPiece + 2;
  CHECK(tok.token_to_piece(sp_a) == " a");
  CHECK(tok.token_to_piece(spm_byte('\n')) == "\n");
  CHECK(tok.token_to_piece(1) == "<s>");
  CHECK(tok.token_to_piece(1, false) == "");
  const Ids ids = {sp_a, spm_byte('c')};
  CHECK(tok.decode(ids) == "ac");  // the prefix space is removed
  // After a BOS that renders as nothing, llama.cpp no longer strips the space.
  const Ids with_bos = {1, sp_a};
  CHECK(tok.decode(with_bos) == " a");
  CHECK(tok.decode(with_bos, true) == " a");
  CHECK(tok.decode(with_bos, false, true) == "<s> a");
  CHECK(tok.is_eog(2));
  CHECK_FALSE(tok.is_eog(1));
}

TEST_CASE("byte-level BPE merges the lowest rank first and falls back to single bytes") {
  // " the": Ġ t h e. Ranks: "h e" (0) before "Ġ t" (1), then "Ġt he" (2).
  const Tokenizer tok = Tokenizer::from_spec(
      bpe_spec({"he", "\xC4\xA0t", "\xC4\xA0the"}, {"h e", "\xC4\xA0 t", "\xC4\xA0t he", "x y"}));
  CHECK(tok.encode(" the", false, false) == Ids{258});
  CHECK(tok.encode(" th", false, false) == Ids{257, 'h'});
  // "x y" merges, but "xy" is no token: llama.cpp then emits the tokens of its single bytes.
  CHECK(tok.encode("xy", false, false) == Ids{'x', 'y'});
  CHECK(tok.token_to_piece(258) == " the");
  CHECK(tok.token_to_piece(256) == "he");
  CHECK(tok.add_bos() == false);
}

TEST_CASE("byte-level BPE cuts user-defined tokens always and control tokens only with parse_special") {
  VocabSpec spec = bpe_spec({"<|endoftext|>", "<tool>"}, {});
  spec.token_types.assign(spec.tokens.size(), tt::kNormal);
  spec.token_types[256] = tt::kControl;
  spec.token_types[257] = tt::kUserDefined;
  spec.eos_id = 256;
  spec.bos_id = 256;
  spec.add_bos = true;
  const Tokenizer tok = Tokenizer::from_spec(spec);
  CHECK(tok.encode("a<tool>b", false, false) == Ids{'a', 257, 'b'});
  CHECK(tok.encode("<|endoftext|>", false, true) == Ids{256});
  CHECK(tok.encode("<|endoftext|>", false, false).size() > 1);
  CHECK(tok.encode("a", true, false) == Ids{256, 'a'});
  CHECK(tok.is_eog(256));
  CHECK(tok.eos() == 256);
  const Ids ids = {256, 'a', 257};
  CHECK(tok.decode(ids) == "a<tool>");
  CHECK(tok.decode(ids, false, true) == "<|endoftext|>a<tool>");
}

TEST_CASE("gpt-2 detokenization cleans up spaces before punctuation as llama.cpp does") {
  const Tokenizer tok = Tokenizer::from_spec(bpe_spec({}, {}));
  const Ids ids = tok.encode("Hello , world . I 'm sure ' it 's", false, false);
  CHECK(tok.decode(ids) == "Hello, world. I'm sure'it's");
}

TEST_CASE("end-of-generation tokens are found by their text") {
  VocabSpec spec = bpe_spec({"<|im_end|>", "<|endoftext|>", "<|fim_pad|>"}, {});
  spec.pre = "qwen2";
  spec.eos_id = 257;
  const Tokenizer tok = Tokenizer::from_spec(spec);
  CHECK(tok.is_eog(256));
  CHECK(tok.is_eog(257));
  CHECK(tok.is_eog(258));
  CHECK(tok.eot() == 256);
  // Marked control, so without parse_special the text is tokenized as ordinary text.
  CHECK((tok.token_attrs(256) & sluice::core::token_attr::kControl) != 0);
  CHECK(tok.encode("<|im_end|>", false, true) == Ids{256});
}

TEST_CASE("unsupported models and pre-tokenizers are refused with their names") {
  VocabSpec bert = bpe_spec({}, {});
  bert.model = "bert";
  check_error(error_of(bert), ErrorCode::unsupported, "'bert'");

  VocabSpec unknown_pre = bpe_spec({}, {});
  unknown_pre.pre = "mystery-pre";
  check_error(error_of(unknown_pre), ErrorCode::unsupported, "'mystery-pre'");

  VocabSpec no_pre = bpe_spec({}, {});
  no_pre.pre = "";
  check_error(error_of(no_pre), ErrorCode::unsupported, "tokenizer.ggml.pre");
}

TEST_CASE("inconsistent vocabularies are refused with the field named") {
  VocabSpec no_merges = bpe_spec({}, {});
  no_merges.merges.reset();
  check_error(error_of(no_merges), ErrorCode::invalid_file, "tokenizer.ggml.merges");

  VocabSpec kimi = bpe_spec({}, {});  // Kimi-K2 alone may omit merges, as in llama.cpp
  kimi.pre = "kimi-k2";
  kimi.merges.reset();
  CHECK(Tokenizer::from_spec(kimi).encode("ab", false, false) == Ids{'a', 'b'});

  VocabSpec duplicate = bpe_spec({"a"}, {});
  check_error(error_of(duplicate), ErrorCode::invalid_file, "duplicate token");

  VocabSpec short_types = spm_spec({});
  short_types.token_types.resize(10);
  check_error(error_of(short_types), ErrorCode::invalid_file, "tokenizer.ggml.token_type");

  VocabSpec bos_missing = bpe_spec({}, {});
  bos_missing.add_bos = true;  // the BPE default BOS id 11 exists here, so point it outside
  bos_missing.tokens.resize(10);
  check_error(error_of(bos_missing), ErrorCode::invalid_file, "bos_token_id");

  const Tokenizer tok = Tokenizer::from_spec(bpe_spec({}, {}));
  try {
    tok.token_to_piece(256);
    FAIL("accepted");
  } catch (const Error& e) {
    check_error(e, ErrorCode::invalid_argument, "token id 256");
  }
}

TEST_CASE("from_gguf names an unsupported tokenizer model found in the file") {
  sluice::test::GgufBytes g;
  g.header(3, 0, 2).kv_str("general.architecture", "test").kv_str("tokenizer.ggml.model", "t5");
  const auto path = sluice::test::temp_dir("tokenizer") / "t5.gguf";
  sluice::test::write_file(path, g.b);
  sluice::io::PreadReader reader(path.string());
  const auto gguf = sluice::core::GgufFile::parse(reader);
  try {
    Tokenizer::from_gguf(gguf);
    FAIL("accepted");
  } catch (const Error& e) {
    check_error(e, ErrorCode::unsupported, "'t5'");
  }
}
