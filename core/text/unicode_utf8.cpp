#include "core/text/unicode_utf8.h"

#include <array>

namespace sluice::core::utf8 {

size_t sequence_length(uint8_t lead) {
  static constexpr uint8_t kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

namespace {

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// One code point at text[pos]; advances pos. Mirrors llama.cpp's unicode_cpt_from_utf8 plus the
// catch in unicode_cpts_from_utf8 that turns its exceptions into U+FFFD and a one-byte step.
uint32_t decode_one(std::string_view text, size_t& pos) {
  const auto at = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = at(pos);
  const size_t left = text.size() - pos;
  if (!(b0 & 0x80)) {
    pos += 1;
    return b0;
  }
  if (!(b0 & 0x40)) {  // stray continuation byte
    pos += 1;
    return kReplacement;
  }
  if (!(b0 & 0x20)) {
    if (left < 2 || !is_continuation(at(pos + 1))) {
      pos += 1;
      return kReplacement;
    }
    const uint32_t cpt = ((b0 & 0x1Fu) << 6) | (at(pos + 1) & 0x3Fu);
    pos += 2;
    return cpt;
  }
  if (!(b0 & 0x10)) {
    if (left < 3 || !is_continuation(at(pos + 1)) || !is_continuation(at(pos + 2))) {
      pos += 1;
      return kReplacement;
    }
    const uint32_t cpt = ((b0 & 0x0Fu) << 12) | ((at(pos + 1) & 0x3Fu) << 6) | (at(pos + 2) & 0x3Fu);
    pos += 3;
    return cpt;
  }
  if (!(b0 & 0x08)) {
    if (left < 4 || !is_continuation(at(pos + 1)) || !is_continuation(at(pos + 2)) ||
        !is_continuation(at(pos + 3))) {
      pos += 1;
      return kReplacement;
    }
    const uint32_t cpt = ((b0 & 0x07u) << 18) | ((at(pos + 1) & 0x3Fu) << 12) |
                         ((at(pos + 2) & 0x3Fu) << 6) | (at(pos + 3) & 0x3Fu);
    pos += 4;
    return cpt;
  }
  pos += 1;  // 11111xxx
  return kReplacement;
}

struct ByteAlphabet {
  std::array<uint32_t, 256> cpt_of_byte{};
  std::array<std::string, 256> text_of_byte;
  std::array<int16_t, 324> byte_of_cpt{};  // every symbol is below U+0100 + 68

  ByteAlphabet() {
    byte_of_cpt.fill(-1);
    const auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      cpt_of_byte[b] = printable(b) ? static_cast<uint32_t>(b) : next_extra++;
    }
    for (int b = 0; b < 256; ++b) {
      append(text_of_byte[b], cpt_of_byte[b]);
      byte_of_cpt[cpt_of_byte[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

std::vector<uint32_t> decode_lossy(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) cpts.push_back(decode_one(text, pos));
  return cpts;
}

void append(std::string& out, uint32_t cpt) {
  if (cpt > 0x10FFFF) cpt = kReplacement;
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string_view byte_to_symbol(uint8_t b) { return byte_alphabet().text_of_byte[b]; }

int symbol_to_byte(uint32_t cpt) {
  const auto& alphabet = byte_alphabet();
  return cpt < alphabet.byte_of_cpt.size() ? alphabet.byte_of_cpt[cpt] : -1;
}

}  // namespace sluice::core::utf8
