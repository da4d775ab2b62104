// BackgroundPrefault (common/background_prefault.h) faults a fresh region in on its own threads
// without changing a byte that a reader already put there.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/background_prefault.h"

namespace {

constexpr uint64_t kPage = 4096;

// How many of the region's 4 KiB pages are resident (mincore).
uint64_t resident_pages(std::byte* p, uint64_t bytes) {
  std::vector<unsigned char> v(bytes / kPage);
  REQUIRE(::mincore(p, bytes, v.data()) == 0);
  uint64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

}  // namespace

TEST_CASE("BackgroundPrefault makes a fresh region resident and keeps bytes already written") {
  const uint64_t bytes = 64ull << 20;
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mapped != MAP_FAILED);
  auto* p = static_cast<std::byte*>(mapped);
  // A reader got there first: one page in the middle, one at the end.
  for (uint64_t at : {uint64_t{37} << 20, bytes - kPage})
    for (uint64_t i = 0; i < kPage; ++i) p[at + i] = static_cast<std::byte>((at + i * 7) & 0xff);
  REQUIRE(resident_pages(p, bytes) < bytes / kPage / 4);

  for (unsigned threads : {1u, 2u, 3u}) {
    sluice::BackgroundPrefault prefault({p, bytes}, threads);
    prefault.wait();
  }
  CHECK(resident_pages(p, bytes) == bytes / kPage);
  for (uint64_t at : {uint64_t{37} << 20, bytes - kPage})
    for (uint64_t i = 0; i < kPage; ++i) REQUIRE(p[at + i] == static_cast<std::byte>((at + i * 7) & 0xff));
  ::munmap(mapped, bytes);
}

TEST_CASE("BackgroundPrefault stopped early leaves the region usable") {
  const uint64_t bytes = 256ull << 20;
  std::vector<std::byte> buffer(bytes);  // already touched: populate is a no-op here
  { sluice::BackgroundPrefault prefault({buffer.data(), bytes}, 2); }  // destroyed at once: stops, joins
  { sluice::BackgroundPrefault nothing({}, 2); }                       // an empty region starts nothing
  buffer[bytes - 1] = std::byte{1};
  CHECK(buffer[bytes - 1] == std::byte{1});
}
