// UTF-8 helpers with llama.cpp's exact leniency, and GPT-2's byte-level alphabet.
//
// The tokenizer must reproduce llama.cpp token for token, including on malformed input, so the
// decoder copies llama.cpp's rules (unicode_cpts_from_utf8) rather than a strict validator's:
//   - the sequence length comes from the lead byte's high bits alone;
//   - a lead byte without enough continuation bytes, a stray continuation byte (10xxxxxx) and
//     a 11111xxx byte each become U+FFFD and consume exactly one byte;
//   - overlong forms and surrogates are NOT rejected: they decode to whatever the bits say.
//
// GPT-2 byte-level BPE stores every byte as a printable code point so that merges never see
// spaces or control bytes: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, and the
// remaining 68 bytes map, in increasing order, to U+0100, U+0101, ... (space 0x20 -> U+0120 'Ġ',
// '\n' 0x0A -> U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::core::utf8 {

inline constexpr uint32_t kReplacement = 0xFFFD;

// Bytes in the sequence that starts with `lead`, judged by its top four bits only (llama.cpp's
// unicode_len_utf8): 0xxx -> 1, 10xx -> 1, 110x -> 2, 1110 -> 3, 1111 -> 4.
size_t sequence_length(uint8_t lead);

// Decodes like llama.cpp (see above). Never throws.
std::vector<uint32_t> decode_lossy(std::string_view text);

// Appends the UTF-8 form of `cpt`. Surrogates are encoded as three bytes, as llama.cpp does;
// code points above U+10FFFF (only reachable from malformed F5..F7 lead bytes) become U+FFFD
// where llama.cpp would throw.
void append(std::string& out, uint32_t cpt);

// GPT-2 byte-level alphabet: the UTF-8 text of the code point that stands for byte `b`.
std::string_view byte_to_symbol(uint8_t b);
// The byte a code point of that alphabet stands for, or -1 when it is not part of it.
int symbol_to_byte(uint32_t cpt);

}  // namespace sluice::core::utf8
