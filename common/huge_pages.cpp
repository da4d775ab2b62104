#include "common/huge_pages.h"

#include <sys/mman.h>

#include <fstream>
#include <string>

namespace sluice {

void advise_huge_pages(void* p, uint64_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (first + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t end = (first + bytes) / kHugePageBytes * kHugePageBytes;
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

uint64_t unadvised_fault_bytes() {
  static const uint64_t bytes = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    if (!std::getline(f, modes)) return kHugePageBytes;
    return modes.find("[always]") != std::string::npos ? kHugePageBytes : uint64_t{4096};
  }();
  return bytes;
}

}  // namespace sluice
