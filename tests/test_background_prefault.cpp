// BackgroundPrefault (common/background_prefault.h) faults a fresh region in on its own threads
// without changing a byte that a reader already put there, and both model loaders run one over
// their weight arena while they read.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/background_prefault.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "core/llama/model.h"
#include "tests/test_support.h"

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

// Whether `load` ran a prefault that faulted pages in. The prefault threads race the reader and
// stop when it is done, so one small load may end before a thread has taken its first chunk:
// a few tries, and any one that faults a chunk is proof.
bool load_prefaults(const std::function<void()>& load) {
  for (int attempt = 0; attempt < 10; ++attempt) {
    const uint64_t before = sluice::BackgroundPrefault::faulted_bytes();
    load();
    const uint64_t faulted = sluice::BackgroundPrefault::faulted_bytes() - before;
    if (faulted > 0) {
      MESSAGE("attempt " << attempt + 1 << ": " << faulted << " bytes faulted in by the load's prefault");
      return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("loading a llama-family or kimi-k3 model in core faults its weight arena in on the prefault threads") {
  const auto ref = sluice::test::reference_dir();
  const std::string ds2 = (ref / "tiny/deepseek2/deepseek2-f16.gguf").string();
  CHECK(load_prefaults([&] { (void)sluice::core::Model::load(ds2); }));
  const std::string k3 = (ref / "kimi-k3/kimi-k3-f16.gguf").string();
  CHECK(load_prefaults([&] { (void)sluice::core::KimiK3Model::load(k3); }));
}

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
