#include "common/huge_pages.h"

#include <sys/mman.h>

namespace sluice {

void advise_huge_pages(void* p, uint64_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (first + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t end = (first + bytes) / kHugePageBytes * kHugePageBytes;
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace sluice
