#include "common/background_prefault.h"

#include <sys/mman.h>

#include <algorithm>

#include "common/huge_pages.h"

namespace sluice {

namespace {
// Eight huge pages: small enough that the threads stay just ahead of the reader, large enough
// that the madvise calls cost nothing next to the zeroing.
constexpr uint64_t kChunkBytes = 8 * kHugePageBytes;
std::atomic<uint64_t> g_faulted_bytes{0};
}  // namespace

uint64_t BackgroundPrefault::faulted_bytes() { return g_faulted_bytes.load(std::memory_order_relaxed); }

BackgroundPrefault::BackgroundPrefault(std::span<std::byte> region, unsigned threads) : region_(region) {
  if (region.empty()) return;
  threads_.reserve(std::max(threads, 1u));
  for (unsigned i = 0; i < std::max(threads, 1u); ++i) threads_.emplace_back([this] { run(); });
}

BackgroundPrefault::~BackgroundPrefault() {
  stop_.store(true, std::memory_order_relaxed);
  wait();
}

void BackgroundPrefault::wait() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void BackgroundPrefault::run() {
  // Chunks start on 2 MiB boundaries so that no two threads fault the same huge page.
  const auto first = reinterpret_cast<uintptr_t>(region_.data());
  const uintptr_t base = first / kHugePageBytes * kHugePageBytes;
  const uintptr_t end = first + region_.size();
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    const uintptr_t lo = std::max(first, base + chunk * kChunkBytes);
    if (lo >= end) return;
    const uintptr_t hi = std::min(end, base + (chunk + 1) * kChunkBytes);
    // madvise wants a page-aligned start; the page holding `first` is the region's own.
    const uintptr_t page_lo = lo / 4096 * 4096;
    if (::madvise(reinterpret_cast<void*>(page_lo), hi - page_lo, MADV_POPULATE_WRITE) != 0) return;
    g_faulted_bytes.fetch_add(hi - page_lo, std::memory_order_relaxed);
  }
}

}  // namespace sluice
