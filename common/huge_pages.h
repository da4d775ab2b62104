// Transparent-huge-page advice for the big long-lived buffers (the resident weights, the expert
// cache arena).
//
// Why: with THP's `defrag` in its default `madvise` mode, an un-advised region gets 2 MiB pages
// only while the kernel has free 2 MiB blocks at hand. Once another process's file sits in the
// page cache, free memory is fragmented and such a region falls back to 4 KiB pages, so every
// matvec walks ~500x more TLB entries. An advised region compacts or reclaims for its huge pages
// at fault time instead.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

inline constexpr uint64_t kHugePageBytes = 2ull << 20;

// Advises the whole 2 MiB pages inside [p, p + bytes) for transparent huge pages. Advice only:
// without THP the memory still works, with 4 KiB pages, and no byte outside the range is touched.
void advise_huge_pages(void* p, uint64_t bytes);

// The most memory one touch of an un-advised anonymous buffer (a std::vector's) can fault in:
// a huge page where THP is enabled "always", else a 4 KiB page. Read once from
// /sys/kernel/mm/transparent_hugepage/enabled (a huge page when it cannot be read).
uint64_t unadvised_fault_bytes();

}  // namespace sluice
