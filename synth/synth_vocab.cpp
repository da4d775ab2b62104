#include "synth/synth_vocab.h"

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/gguf/gguf_stream_writer.h"
#include "io/pread_reader.h"

namespace sluice::core::synth {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// map to U+0100.. in byte order.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> t(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    t[b] = utf8(printable ? b : next++);
  }
  return t;
}

struct Specials {
  std::vector<std::string> names;
  std::string bos, eos, eot, pad;
};

Specials specials_for(const Preset& p) {
  if (p.name == "kimi-k2" || p.name == "kimi-k3")
    return {{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
             "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
             "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|media_start|>", "<|media_content|>",
             "<|media_pad|>", "<|media_end|>"},
            "[BOS]", "[EOS]", "<|im_end|>", ""};
  if (p.arch == Arch::deepseek2)
    return {{"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
             "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
             "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
             "<｜tool▁output▁end｜>"},
            "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "", ""};
  if (p.arch == Arch::qwen3moe)
    return {{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
             "<tool_response>", "</tool_response>"},
            "<|endoftext|>", "<|im_end|>", "", "<|endoftext|>"};
  return {{"<unk>", "<s>", "</s>"}, "<s>", "</s>", "", ""};
}

}  // namespace

BuiltinVocab make_builtin_vocab(const Preset& p, uint32_t n_vocab) {
  const Specials sp = specials_for(p);
  if (n_vocab < 256 + sp.names.size() + 1)
    throw Error(ErrorCode::invalid_argument, "vocabulary of " + std::to_string(n_vocab) + " tokens is too small: " +
                std::to_string(256 + sp.names.size() + 1) + " needed for the byte tokens and " + p.name +
                "'s special tokens");
  BuiltinVocab v;
  v.tokens = byte_tokens();
  const size_t n_merges = n_vocab - 256 - sp.names.size();
  v.tokens.reserve(n_vocab);
  v.merges.reserve(n_merges);

  // Breadth-first: level 2 = first char x letter, level n+1 = level n token x letter.
  std::vector<std::string> letters, firsts;
  const std::string_view common = "etaoinshrdlcumwfgypbvkjxqz";
  for (char c : common) letters.emplace_back(1, c);
  for (char c : common) letters.emplace_back(1, static_cast<char>(c - 'a' + 'A'));
  firsts.push_back(utf8(0x120));  // "Ġ": a leading space
  for (const std::string& l : letters) firsts.push_back(l);
  std::vector<std::string> level = firsts;
  while (v.merges.size() < n_merges) {
    std::vector<std::string> next;
    for (const std::string& a : level) {
      for (const std::string& b : letters) {
        if (v.merges.size() == n_merges) break;
        v.merges.push_back(a + " " + b);
        v.tokens.push_back(a + b);
        next.push_back(a + b);
      }
      if (v.merges.size() == n_merges) break;
    }
    level = std::move(next);
  }
  v.token_type.assign(v.tokens.size(), 1);
  auto id_of = [&](const std::string& s) -> int64_t {
    if (s.empty()) return -1;
    for (size_t i = 0; i < sp.names.size(); ++i)
      if (sp.names[i] == s) return static_cast<int64_t>(256 + n_merges + i);
    return -1;
  };
  for (const std::string& s : sp.names) {
    v.tokens.push_back(s);
    v.token_type.push_back(3);
  }
  v.bos = static_cast<uint32_t>(id_of(sp.bos));
  v.eos = static_cast<uint32_t>(id_of(sp.eos));
  v.eot = id_of(sp.eot);
  v.pad = id_of(sp.pad);
  return v;
}

void add_builtin_vocab(GgufStreamWriter& w, const Preset& p, uint32_t n_vocab) {
  const BuiltinVocab v = make_builtin_vocab(p, n_vocab);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "gpt-2");
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", v.token_type);
  w.add_string_array("tokenizer.ggml.merges", v.merges);
  w.add_u32("tokenizer.ggml.bos_token_id", v.bos);
  w.add_u32("tokenizer.ggml.eos_token_id", v.eos);
  if (v.eot >= 0) w.add_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(v.eot));
  if (v.pad >= 0) w.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad));
  w.add_bool("tokenizer.ggml.add_bos_token", p.add_bos);
  if (!p.chat_template.empty()) w.add_string("tokenizer.chat_template", p.chat_template);
}

uint32_t copy_vocab(GgufStreamWriter& w, const Preset& p, const std::string& path) {
  io::PreadReader reader(path);
  const GgufFile f = GgufFile::parse(reader);
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufValueType::array || tokens->elem_type != GgufValueType::string)
    throw Error(ErrorCode::invalid_file, "--vocab '" + path + "' has no tokenizer.ggml.tokens string array");
  for (const GgufKv& kv : f.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) != 0) continue;
    const GgufValue& v = kv.value;
    switch (v.type) {
      case GgufValueType::u8: w.add_u8(kv.key, static_cast<uint8_t>(v.u)); break;
      case GgufValueType::i8: w.add_i8(kv.key, static_cast<int8_t>(v.i)); break;
      case GgufValueType::u16: w.add_u16(kv.key, static_cast<uint16_t>(v.u)); break;
      case GgufValueType::i16: w.add_i16(kv.key, static_cast<int16_t>(v.i)); break;
      case GgufValueType::u32: w.add_u32(kv.key, static_cast<uint32_t>(v.u)); break;
      case GgufValueType::i32: w.add_i32(kv.key, static_cast<int32_t>(v.i)); break;
      case GgufValueType::u64: w.add_u64(kv.key, v.u); break;
      case GgufValueType::i64: w.add_i64(kv.key, v.i); break;
      case GgufValueType::f32: w.add_f32(kv.key, static_cast<float>(v.f)); break;
      case GgufValueType::f64: w.add_f64(kv.key, v.f); break;
      case GgufValueType::boolean: w.add_bool(kv.key, v.u != 0); break;
      case GgufValueType::string: w.add_string(kv.key, v.s); break;
      case GgufValueType::array:
        if (v.elem_type == GgufValueType::string) w.add_string_array(kv.key, v.strings);
        else if (v.elem_type != GgufValueType::array)
          w.add_raw_array(kv.key, static_cast<uint32_t>(v.elem_type), v.count, v.raw);
        break;
    }
  }
  if (!w.has_key("tokenizer.chat_template") && !p.chat_template.empty())
    w.add_string("tokenizer.chat_template", p.chat_template);
  return static_cast<uint32_t>(tokens->strings.size());
}

}  // namespace sluice::core::synth
