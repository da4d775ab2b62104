// Random-extent harness for the io tests: reads many extents (tiny, odd, block-crossing,
// multi-MiB, ending at end of file) with many in flight and checks every byte against the file.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "io/reader.h"

namespace sluice::test {

struct ExtentCheck {
  size_t verified = 0;
  size_t mismatched = 0;
  size_t failed = 0;
  int64_t first_error = 0;
};

enum class Placement { arbitrary, zero_copy };

inline std::vector<io::ReadRequest> random_extents(uint64_t file_size, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<io::ReadRequest> extents;
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  for (size_t i = 0; i < count; ++i) {
    uint64_t length;
    switch (i % 6) {
      case 0: length = pick(1, 64); break;                 // tiny
      case 1: length = pick(100, 9000); break;             // crosses 4 KiB boundaries
      case 2: length = 4096 * pick(1, 8); break;           // whole blocks (offset may be odd)
      case 3: length = pick(1u << 20, 5u << 20); break;    // multi-MiB
      case 4: length = pick(1, 300000); break;
      default: length = pick(1, 2u << 20); break;
    }
    length = std::min(length, file_size);
    uint64_t offset = pick(0, file_size - length);
    if (i % 11 == 0) offset = file_size - length;          // ends at end of file
    if (i % 13 == 0) offset = 0;
    if (i % 7 == 0) offset &= ~uint64_t{4095};              // aligned start
    extents.push_back(io::ReadRequest{offset, length, nullptr, i});
  }
  return extents;
}

// Reads every extent through `reader` keeping up to `max_in_flight` outstanding, and compares
// with `file` (the file's bytes).
inline ExtentCheck check_extents(io::Reader& reader, const std::vector<uint8_t>& file,
                                 std::vector<io::ReadRequest> extents, size_t max_in_flight,
                                 Placement placement) {
  ExtentCheck check;
  const uint32_t a = std::max<uint32_t>(reader.alignment(), 4096);
  std::vector<std::unique_ptr<std::byte[]>> buffers(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    buffers[i] = std::make_unique<std::byte[]>(extents[i].length + 2 * a);
    std::byte* base = buffers[i].get();
    uint64_t pad = placement == Placement::zero_copy ? io::placement_pad(base, extents[i].offset, a)
                                                     : 1 + (i * 7) % 31;
    extents[i].dst = base + pad;
    extents[i].tag = i;
  }
  size_t next = 0;
  std::vector<io::Completion> done(64);
  while (next < extents.size() || reader.in_flight() > 0) {
    size_t room = max_in_flight - std::min(max_in_flight, reader.in_flight());
    size_t n = std::min(room, extents.size() - next);
    if (n > 0) {
      reader.submit(std::span(extents).subspan(next, n));
      next += n;
    }
    if (reader.in_flight() == 0) continue;
    size_t got = reader.reap(done, 1);
    for (size_t k = 0; k < got; ++k) {
      const io::Completion& c = done[k];
      if (c.result < 0) {
        ++check.failed;
        if (check.first_error == 0) check.first_error = c.result;
        continue;
      }
      if (c.result != static_cast<int64_t>(c.request.length) ||
          std::memcmp(c.request.dst, file.data() + c.request.offset, c.request.length) != 0) {
        ++check.mismatched;
      } else {
        ++check.verified;
      }
    }
  }
  return check;
}

}  // namespace sluice::test
