// AlignedBuffer: an owned, page-aligned block of anonymous memory (mmap).
//
// Used for the uring reader's staging area, the bandwidth probe's destinations and tests. Page
// alignment satisfies every O_DIRECT alignment seen in practice (512 B or 4 KiB), and anonymous
// memory can be registered with io_uring as a fixed buffer. Contents start zeroed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::io {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Throws Error(budget) naming the size when the memory cannot be mapped.
  explicit AlignedBuffer(uint64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace sluice::io
