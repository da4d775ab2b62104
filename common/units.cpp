#include "common/units.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/error.h"

namespace sluice {

namespace {

Error bad_size(std::string_view text, std::string_view what) {
  return Error(ErrorCode::invalid_argument,
               std::string(what) + ": cannot read '" + std::string(text) +
                   "' as a size (examples: 512M, 29G, 1.5T, 1048576)");
}

}  // namespace

uint64_t parse_size(std::string_view text, std::string_view what) {
  if (text.empty()) throw bad_size(text, what);
  size_t pos = 0;
  while (pos < text.size() && ((text[pos] >= '0' && text[pos] <= '9') || text[pos] == '.')) ++pos;
  if (pos == 0) throw bad_size(text, what);
  double number = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + pos, number);
  if (ec != std::errc() || ptr != text.data() + pos) throw bad_size(text, what);
  std::string_view suffix = text.substr(pos);
  double scale = 1;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'K': case 'k': scale = 1024.0; break;
      case 'M': case 'm': scale = 1024.0 * 1024; break;
      case 'G': case 'g': scale = 1024.0 * 1024 * 1024; break;
      case 'T': case 't': scale = 1024.0 * 1024 * 1024 * 1024; break;
      case 'B': case 'b': scale = 1; break;
      default: throw bad_size(text, what);
    }
    std::string_view rest = suffix.substr(1);
    if (suffix[0] == 'B' || suffix[0] == 'b') {
      if (!rest.empty()) throw bad_size(text, what);
    } else if (!(rest.empty() || rest == "B" || rest == "iB" || rest == "ib")) {
      throw bad_size(text, what);
    }
  }
  double bytes = std::floor(number * scale);
  if (!(bytes >= 1) || bytes > 1.8e19) throw bad_size(text, what);
  return static_cast<uint64_t>(bytes);
}

bool is_percent(std::string_view text) { return !text.empty() && text.back() == '%'; }

double parse_percent(std::string_view text, std::string_view what) {
  if (!is_percent(text)) {
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": expected a percentage like 10%, got '" + std::string(text) + "'");
  }
  double value = 0;
  std::string_view digits = text.substr(0, text.size() - 1);
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || !(value > 0) || value > 100) {
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": percentage must be in (0, 100], got '" + std::string(text) + "'");
  }
  return value / 100.0;
}

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw Error(ErrorCode::invalid_file, std::string(what) + ": " + std::to_string(a) + " x " +
                                             std::to_string(b) + " overflows 64 bits");
  }
  return out;
}

uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw Error(ErrorCode::invalid_file, std::string(what) + ": " + std::to_string(a) + " + " +
                                             std::to_string(b) + " overflows 64 bits");
  }
  return out;
}

}  // namespace sluice
