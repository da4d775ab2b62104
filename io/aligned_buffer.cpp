#include "io/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/units.h"

namespace sluice::io {

AlignedBuffer::AlignedBuffer(uint64_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    size_ = 0;
    throw Error(ErrorCode::budget, "cannot map " + human_bytes(bytes) + " of aligned memory: " +
                                       std::strerror(errno));
  }
  data_ = static_cast<std::byte*>(p);
}

AlignedBuffer::~AlignedBuffer() {
  if (data_) ::munmap(data_, size_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace sluice::io
