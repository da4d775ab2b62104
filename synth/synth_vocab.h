// Tokenizer metadata for synthetic models.
//
// Two sources:
//   - copy: every `tokenizer.*` key of another GGUF (`--vocab VOCAB.gguf`, e.g. llama.cpp's
//     models/ggml-vocab-*.gguf or a real model), copied verbatim; n_vocab becomes its token count.
//   - built-in: a byte-level BPE vocabulary (`tokenizer.ggml.model` = "gpt2", pre "gpt-2") of
//     exactly n_vocab tokens: the 256 byte tokens in GPT-2's byte-to-unicode spelling (ids 0-255,
//     ordered by byte value), then merges that fill the vocabulary (merge i makes token 256 + i),
//     then the preset's special tokens (control tokens, last ids). Merges first join pairs of
//     common characters ("t h" -> "th", "Ġ t" -> "Ġt"), then extend those by one more character,
//     so every merge's two parts are earlier tokens and every token string is unique: the result
//     is a valid BPE vocabulary for llama.cpp's and sluice's tokenizers (it just splits text
//     differently from any real model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "synth/synth_preset.h"

namespace sluice::core {
class GgufStreamWriter;
}

namespace sluice::core::synth {

struct BuiltinVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_type;  // 1 normal, 3 control
  std::vector<std::string> merges;
  uint32_t bos = 0, eos = 0;
  int64_t eot = -1, pad = -1;       // -1: key absent
};

// Throws Error(invalid_argument) when n_vocab is too small for 256 bytes + the specials + 1.
BuiltinVocab make_builtin_vocab(const Preset& p, uint32_t n_vocab);

// Adds the built-in vocabulary's tokenizer keys (and the preset's chat template) to w.
void add_builtin_vocab(GgufStreamWriter& w, const Preset& p, uint32_t n_vocab);

// Copies every tokenizer.* key of the GGUF at `path` into w; adds the preset's chat template when
// the file has none. Returns the file's token count. Throws Error(invalid_file) when the file
// has no tokenizer.ggml.tokens.
uint32_t copy_vocab(GgufStreamWriter& w, const Preset& p, const std::string& path);

}  // namespace sluice::core::synth
