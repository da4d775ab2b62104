// Handing a buffer's memory back to the kernel without giving up the buffer.
//
// Why: the prefill batch's scratch (activations for -b tokens) and the expert cache's arena take
// turns with part of the budget (core/engine.h, "Lending"). A buffer whose pages were released
// keeps its address and size; its next touch faults in a zeroed page, so only scratch whose
// contents are rewritten before they are read may be released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

// madvise(MADV_DONTNEED) over the whole 4 KiB pages inside [p, p + bytes): those pages leave the
// resident set and read as zeros afterwards. Bytes of partial pages at either end are kept (they
// may belong to another object). Returns the bytes released. Private anonymous memory only
// (std::vector, AlignedBuffer, the cache arena): that is what MADV_DONTNEED zeroes.
uint64_t release_pages(void* p, uint64_t bytes);

// A tally of released buffers: their bytes, and how many there were (each may fault back in up
// to one transparent huge page more than it uses, where THP backs the heap).
struct ReleasedPages {
  uint64_t bytes = 0;
  size_t buffers = 0;
  void add(void* p, uint64_t n) {
    bytes += release_pages(p, n);
    ++buffers;
  }
  template <class T>
  void add(std::vector<T>& buffer) {
    add(static_cast<void*>(buffer.data()), buffer.size() * sizeof(T));
  }
  void add(const ReleasedPages& other) {
    bytes += other.bytes;
    buffers += other.buffers;
  }
};

}  // namespace sluice
