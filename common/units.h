// Byte sizes as people write and read them.
//
// parse_size accepts what --budget takes: a plain byte count ("1048576"), or a number with a
// binary unit suffix K/M/G/T (optionally followed by "iB" or "B"): "29G" and "29GiB" both mean
// 29 * 2^30 bytes, never 29e9. Fractions are allowed ("1.5G"). Percentages are not sizes; callers
// that accept "10%" check for it first (see is_percent / parse_percent).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

// Throws Error(invalid_argument) naming `what` (e.g. "--budget") and the text on bad input.
uint64_t parse_size(std::string_view text, std::string_view what);

bool is_percent(std::string_view text);
// "10%" -> 0.10; throws Error(invalid_argument) when not in (0, 100].
double parse_percent(std::string_view text, std::string_view what);

// 3.2 GiB, 640.0 MiB, 12 B ...
std::string human_bytes(uint64_t bytes);

// a * b, throwing Error(invalid_file) naming `what` when it overflows 64 bits.
uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view what);
uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what);

}  // namespace sluice
