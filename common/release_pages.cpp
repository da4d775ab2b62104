#include "common/release_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"

namespace sluice {

uint64_t release_pages(void* p, uint64_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (first + page - 1) / page * page;
  const uintptr_t end = (first + bytes) / page * page;
  if (p == nullptr || end <= begin) return 0;
  // A failure here would leave memory resident that the budget already gave to someone else.
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0)
    throw Error(ErrorCode::internal, "cannot release " + std::to_string(end - begin) + " bytes of scratch to the kernel: " +
                                         std::strerror(errno));
  return end - begin;
}

}  // namespace sluice
