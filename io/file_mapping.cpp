#include "io/file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL and get the touch loop
#endif

namespace sluice::io {
namespace {

constexpr uintptr_t kPage = 4096;

// The whole pages holding `view`.
std::span<std::byte> page_span(std::span<const std::byte> view) {
  const auto begin = reinterpret_cast<uintptr_t>(view.data()) & ~(kPage - 1);
  const auto end = (reinterpret_cast<uintptr_t>(view.data()) + view.size() + kPage - 1) & ~(kPage - 1);
  return {reinterpret_cast<std::byte*>(begin), end - begin};
}

}  // namespace

FileMapping::FileMapping(const std::vector<FilePart>& parts) {
  parts_.reserve(parts.size());
  for (const FilePart& f : parts) {
    Part p{f, ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC), nullptr};
    if (p.fd < 0) {
      const int err = errno;
      release();
      throw Error(ErrorCode::io_error, "cannot open '" + f.path + "' to map it: " + std::strerror(err));
    }
    parts_.push_back(p);
    if (f.bytes == 0) continue;
    void* m = ::mmap(nullptr, f.bytes, PROT_READ, MAP_SHARED, p.fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      release();
      throw Error(ErrorCode::io_error, "cannot map '" + f.path + "' (" + std::to_string(f.bytes) + " bytes): " + std::strerror(err));
    }
    parts_.back().base = static_cast<std::byte*>(m);
  }
}

FileMapping::~FileMapping() { release(); }

void FileMapping::release() {
  for (Part& p : parts_) {
    if (p.base) ::munmap(p.base, p.file.bytes);
    if (p.fd >= 0) ::close(p.fd);
  }
  parts_.clear();
}

std::span<const std::byte> FileMapping::view(uint64_t offset, uint64_t bytes) const {
  for (const Part& p : parts_) {
    if (offset < p.file.base || offset - p.file.base >= p.file.bytes) continue;
    const uint64_t in_part = offset - p.file.base;
    if (bytes > p.file.bytes - in_part) return {};
    return {p.base + in_part, bytes};
  }
  return {};
}

const FileMapping::Part* FileMapping::part_of(std::span<const std::byte> view) const {
  for (const Part& p : parts_)
    if (p.base && view.data() >= p.base && view.data() + view.size() <= p.base + p.file.bytes) return &p;
  return nullptr;
}

void FileMapping::populate(std::span<const std::byte> view) const {
  if (view.empty()) return;
  const Part* p = part_of(view);
  if (!p) throw Error(ErrorCode::internal, "FileMapping::populate: the range is not one of this mapping's views");
  const std::span<std::byte> pages = page_span(view);
  if (::madvise(pages.data(), pages.size(), MADV_POPULATE_READ) == 0) return;
  if (errno != EINVAL) {
    // EFAULT/EIO: the file cannot be read there (truncated under us, a failing disk).
    throw Error(ErrorCode::io_error, "cannot read '" + p->file.path + "' at offset " +
                                         std::to_string(view.data() - p->base) + " (" + std::to_string(view.size()) +
                                         " bytes) into memory: " + std::strerror(errno));
  }
  ::madvise(pages.data(), pages.size(), MADV_WILLNEED);
  volatile std::byte sink{};
  for (size_t o = 0; o < pages.size(); o += kPage) sink = pages[o];
  (void)sink;
}

void FileMapping::drop(std::span<const std::byte> view) const {
  if (view.empty()) return;
  const Part* p = part_of(view);
  if (!p) throw Error(ErrorCode::internal, "FileMapping::drop: the range is not one of this mapping's views");
  const std::span<std::byte> pages = page_span(view);
  ::madvise(pages.data(), pages.size(), MADV_DONTNEED);
  ::posix_fadvise(p->fd, static_cast<off_t>(pages.data() - p->base), static_cast<off_t>(pages.size()), POSIX_FADV_DONTNEED);
}

}  // namespace sluice::io
